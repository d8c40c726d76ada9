// Shell completion: `kibotosctl __complete WORDS...` and the scripts that ask it.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "agent/ctl/cli_error.h"
#include "agent/ctl/completion.h"
#include "agent/ctl/completion_script.h"
#include "agent/ctl/ctl_main.h"
#include "agent/ctl/id_lister.h"
#include "fake_agent.h"

using namespace kib::ctl;

namespace {

// A directory standing in for /run/netns, removed with its entries.
class NetnsDir {
 public:
  explicit NetnsDir(const std::vector<std::string>& names) {
    char dir[] = "/tmp/kibotosctl-netns-XXXXXX";
    path_ = mkdtemp(dir);
    for (const auto& n : names) {
      std::ofstream(path_ + "/" + n).put('\n');
      names_.push_back(n);
    }
  }
  ~NetnsDir() {
    for (const auto& n : names_) ::unlink((path_ + "/" + n).c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> names_;
};

}  // namespace

TEST_CASE("completion offers groups and builtins, then verbs, then flags") {
  CHECK(completion_candidates({""}) == "agent\ncompletion\negress\nhelp\nworkspace\n");
  CHECK(completion_candidates({"egress", "l"}) == "label\nlist\n");
  CHECK(completion_candidates({"egress", "create", "--u"}) == "--udp-enabled\n--username\n");
  CHECK(completion_candidates({"-o", "json", "workspace", "up"}) == "update-policy\n");
}

TEST_CASE("completion asks for file names after file flags") {
  CHECK(completion_candidates({"egress", "create", "--password-file", ""}) == "__files__\n");
  CHECK(completion_candidates({"workspace", "create", "--policy", "p"}) == "__files__\n");
  CHECK(completion_candidates({"-o", ""}) == "id\njson\ntable\nyaml\n");
}

TEST_CASE("completion of builtins: the shells after 'completion', commands after 'help'") {
  CHECK(completion_candidates({"completion", ""}) == "bash\nfish\nzsh\n");
  CHECK(completion_candidates({"completion", "bash", ""}).empty());
  CHECK(completion_candidates({"help", "e"}) == "egress\n");
  CHECK(completion_candidates({"help", "workspace", "s"}) == "status\n");
}

TEST_CASE("--netns completes the names under /run/netns, and their paths after '/'") {
  NetnsDir dir({"vm1", "vm2", "other"});
  CompletionSources src;
  src.netns_dir = dir.path();
  CHECK(completion_candidates({"workspace", "create", "--netns", "vm"}, src) == "vm1\nvm2\n");
  CHECK(completion_candidates({"workspace", "create", "--netns", dir.path() + "/o"}, src) == dir.path() + "/other\n");
  CHECK(completion_candidates({"workspace", "create", "--netns", "/"}, src) ==
        dir.path() + "/other\n" + dir.path() + "/vm1\n" + dir.path() + "/vm2\n");
  // A path elsewhere is any file; no directory means no names.
  CHECK(completion_candidates({"workspace", "create", "--netns", "/proc/1/ns/n"}, src) == "__files__\n");
  src.netns_dir = dir.path() + "/absent";
  CHECK(completion_candidates({"workspace", "create", "--netns", ""}, src).empty());
}

TEST_CASE("the positional ID completes from the group's list, with the connection flags given") {
  std::vector<std::pair<std::string, std::string>> asked;  // command, socket
  CompletionSources src;
  src.env_socket = "/env.sock";
  src.ids = [&](const CommandSpec& c, const Endpoint& ep) {
    asked.emplace_back(std::string(c.group) + " " + std::string(c.verb), ep.unix_socket);
    CHECK(ep.max_time_ms == kCompletionTimeoutMs);
    return std::vector<std::string>{"eg-a1", "eg-b2", "eg-a3"};
  };
  CHECK(completion_candidates({"egress", "delete", "eg-a"}, src) == "eg-a1\neg-a3\n");
  CHECK(completion_candidates({"--socket", "/s", "workspace", "status", ""}, src) == "eg-a1\neg-a3\neg-b2\n");
  CHECK(completion_candidates({"egress", "update", "--socket=/t", "--expected-revision", "3", ""}, src).size() > 0);
  REQUIRE(asked.size() == 3);
  CHECK(asked[0] == std::pair<std::string, std::string>{"egress delete", "/env.sock"});
  CHECK(asked[1] == std::pair<std::string, std::string>{"workspace status", "/s"});
  CHECK(asked[2].second == "/t");
  // Not once the ID is given, not for commands without one, not in help.
  CHECK(completion_candidates({"egress", "get", "eg-a1", ""}, src).empty());
  CHECK(completion_candidates({"egress", "list", ""}, src).empty());
  CHECK(completion_candidates({"help", "egress", "get", ""}, src).empty());
  CHECK(asked.size() == 3);
}

TEST_CASE("IDs come from the agent's list call, page after page") {
  FakeAgent agent({{200, R"({"egresses":[{"egressId":"eg-1"},{"egressId":"eg-2"}],"nextPageToken":"t1"})"},
                   {200, R"({"egresses":[{"egressId":"eg-3"}]})"}});
  std::ostringstream out;
  print_completions({"egress", "get", "--socket", agent.socket_path(), "eg-"}, out, nullptr);
  CHECK(out.str() == "eg-1\neg-2\neg-3\n");
  const auto& reqs = agent.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].path == "/kibotos.ctrl.v1.EgressService/ListEgresses");
  CHECK(reqs[1].body == R"({"pageToken":"t1"})");
}

TEST_CASE("Workspace IDs come from ListWorkspaces") {
  FakeAgent agent({{200, R"({"workspaces":[{"workspaceId":"ws-1"}]})"}});
  std::ostringstream out;
  print_completions({"workspace", "connections", "--socket", agent.socket_path(), ""}, out, nullptr);
  CHECK(out.str() == "ws-1\n");
  CHECK(agent.requests().at(0).path == "/kibotos.ctrl.v1.WorkspaceService/ListWorkspaces");
}

TEST_CASE("ID completion is silent and empty when the agent fails or is absent") {
  FakeAgent agent({{503, R"({"code":"unavailable","message":"down"})"}, {200, "not json"}});
  for (int i = 0; i < 2; ++i) {
    std::ostringstream out;
    print_completions({"egress", "get", "--socket", agent.socket_path(), ""}, out, nullptr);
    CHECK(out.str().empty());
  }
  std::ostringstream out, err;
  CHECK(run_ctl({"__complete", "egress", "get", "--socket", "/nonexistent/kibotos.sock", ""}, out, err, nullptr) == 0);
  CHECK(out.str().empty());
  CHECK(err.str().empty());
}

TEST_CASE("an agent that does not answer costs completion about a second, not the command timeout") {
  // A socket that accepts (the backlog) but never answers.
  FakeAgent agent({});
  const auto start = std::chrono::steady_clock::now();
  CHECK(list_ids(*find_command("egress", "get"), Endpoint{agent.socket_path(), "", "", "", "", 1, 300}).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}

TEST_CASE("completion SHELL prints a script that asks kibotosctl __complete") {
  for (const char* shell : {"bash", "zsh", "fish"}) {
    std::ostringstream out, err;
    CHECK(run_ctl({"completion", shell}, out, err, nullptr) == 0);
    CHECK(out.str() == completion_script(shell));
    CHECK(out.str().find("kibotosctl __complete") != std::string::npos);
  }
  std::ostringstream out, err;
  CHECK(run_ctl({"completion", "tcsh"}, out, err, nullptr) == kExitUsage);
  CHECK(err.str() == "error: invalid_argument: SHELL must be bash, zsh or fish, not 'tcsh'\n");
}
