// Help: the overview, one group's commands (`egress --help`, `egress`, `help egress`)
// and one command's flags (`egress create --help`).
#include <doctest/doctest.h>

#include <sstream>

#include "agent/ctl/ctl_main.h"
#include "agent/ctl/help_text.h"

using namespace kib::ctl;

namespace {
std::string run_ok(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CHECK(run_ctl(args, out, err, nullptr) == 0);
  CHECK(err.str().empty());
  return out.str();
}
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("the overview lists every command of the table and the builtins") {
  const std::string h = run_ok({"--help"});
  for (const auto& c : command_table()) {
    std::string line(c.group);  // piecewise: GCC 12's -Wrestrict false positive at -O2
    if (!c.verb.empty()) {
      line += ' ';
      line += c.verb;
    }
    CHECK_MESSAGE(has(h, "  " + line), line);
  }
  CHECK(has(h, "workspace update-policy WORKSPACE_ID"));
  CHECK(has(h, "completion SHELL"));
  CHECK(has(h, "help [GROUP [COMMAND]]"));
  CHECK(run_ok({"help"}) == h);
}

TEST_CASE("a group's help lists its commands only, asked three ways") {
  const std::string h = run_ok({"egress", "--help"});
  CHECK(has(h, "Usage: kibotosctl egress COMMAND"));
  CHECK(has(h, "egress annotate EGRESS_ID"));
  CHECK_FALSE(has(h, "workspace"));
  CHECK_FALSE(has(h, "completion SHELL"));
  CHECK(has(h, "Run 'kibotosctl egress COMMAND --help'"));
  CHECK(run_ok({"egress"}) == h);
  CHECK(run_ok({"help", "egress"}) == h);
  CHECK(run_ok({"-h", "egress"}) == h);
}

TEST_CASE("a command's help shows its flags, required ones marked, and the global flags") {
  const std::string h = run_ok({"egress", "create", "--help"});
  CHECK(has(h, "Usage: kibotosctl egress create [flags]"));
  CHECK(has(h, "--address VALUE            SOCKS5 endpoint host:port (required)"));
  CHECK(has(h, "--udp-enabled "));
  CHECK(has(h, "Global flags:\n  -o, --output VALUE"));
  CHECK_FALSE(has(h, "--expected-revision"));
  CHECK(run_ok({"help", "egress", "create"}) == h);
  CHECK(
      has(run_ok({"workspace", "update-policy", "--help"}), "Usage: kibotosctl workspace update-policy WORKSPACE_ID"));
}

TEST_CASE("help completion says how to load each shell's script") {
  const std::string h = run_ok({"help", "completion"});
  CHECK(has(h, "Usage: kibotosctl completion SHELL"));
  CHECK(has(h, "source <(kibotosctl completion bash)"));
  CHECK(has(h, "kibotosctl completion fish | source"));
  CHECK(run_ok({"completion", "--help"}) == h);
}
