#include <doctest/doctest.h>

#include "agent/ctl/cli_args.h"

using namespace kib::ctl;

namespace {
Invocation parse_ok(std::vector<std::string> args, const char* env = nullptr) {
  auto r = parse_args(args, env);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return std::move(r).value();
}
std::string parse_err(std::vector<std::string> args) {
  auto r = parse_args(args, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kib::Code::invalid_argument);
  return r.error().message;
}
}  // namespace

TEST_CASE("a group without verbs is a command by itself") {
  auto inv = parse_ok({"agent"});
  REQUIRE(inv.command != nullptr);
  CHECK(inv.command->method == "kibotos.ctrl.v1.AgentService.GetAgent");
}

TEST_CASE("group and verb select the row of the command table") {
  auto inv = parse_ok({"egress", "get", "eg-1"});
  CHECK(inv.command->method == "kibotos.ctrl.v1.EgressService.GetEgress");
  CHECK(inv.positional == "eg-1");
}

TEST_CASE("flags take values separately or after '='") {
  auto inv = parse_ok({"egress", "create", "--address", "proxy:1080", "--label=a=b", "--label", "c=d"});
  REQUIRE(inv.values.size() == 3);
  CHECK(inv.values[0].first->name == "address");
  CHECK(inv.values[0].second == "proxy:1080");
  CHECK(inv.values[1].second == "a=b");
  CHECK(inv.values[2].second == "c=d");
}

TEST_CASE("global flags are accepted before and after the command") {
  auto inv = parse_ok({"-o", "json", "--socket", "/tmp/s", "egress", "list", "--output=yaml"});
  CHECK(inv.global.output == OutputFormat::yaml);
  CHECK(inv.global.socket == "/tmp/s");
}

TEST_CASE("the socket comes from the flag, else KIBOTOS_SOCKET, else the default") {
  CHECK(parse_ok({"agent"}).global.socket == "/run/kibotos/ctrl.sock");
  CHECK(parse_ok({"agent"}, "/env/sock").global.socket == "/env/sock");
  CHECK(parse_ok({"agent", "--socket", "/flag/sock"}, "/env/sock").global.socket == "/flag/sock");
}

TEST_CASE("unknown commands and flags are usage errors") {
  CHECK(parse_err({"frobnicate"}) == "unknown command 'frobnicate' (see kibotosctl --help)");
  CHECK(parse_err({"egress", "frob"}) == "unknown command 'egress frob' (see kibotosctl egress --help)");
  CHECK(parse_err({"egress", "get", "x", "--bogus"}) == "unknown flag '--bogus'");
  CHECK(parse_err({"egress", "get", "x", "--label", "a=b"}).find("unknown flag") != std::string::npos);
}

TEST_CASE("a mistyped command, verb, flag or value names the close match") {
  CHECK(parse_err({"egres", "list"}) == "unknown command 'egres'; did you mean 'egress'?");
  CHECK(parse_err({"wrokspace"}) == "unknown command 'wrokspace'; did you mean 'workspace'?");
  CHECK(parse_err({"completon", "bash"}) == "unknown command 'completon'; did you mean 'completion'?");
  CHECK(parse_err({"egress", "lsit"}) == "unknown command 'egress lsit'; did you mean 'egress list'?");
  CHECK(parse_err({"workspace", "update-polcy", "w"}) ==
        "unknown command 'workspace update-polcy'; did you mean 'workspace update-policy'?");
  CHECK(parse_err({"egress", "create", "--adress", "a:1"}) == "unknown flag '--adress'; did you mean --address?");
  CHECK(parse_err({"egress", "list", "--sokcet", "/s"}) == "unknown flag '--sokcet'; did you mean --socket?");
  CHECK(parse_err({"agent", "-o", "jsn"}) ==
        "-o/--output must be table, json, yaml or id, not 'jsn'; did you mean 'json'?");
  CHECK(parse_err({"completion", "fihs"}) == "SHELL must be bash, zsh or fish, not 'fihs'; did you mean 'fish'?");
}

TEST_CASE("a flag of the command given before it says flags follow the command") {
  CHECK(parse_err({"--address", "a:1", "egress", "create"}) == "unknown flag '--address' (flags follow the command)");
}

TEST_CASE("a group without its verb asks for the group's help") {
  const auto inv = parse_ok({"egress"});
  CHECK(inv.global.help);
  CHECK(inv.group == "egress");
  CHECK(inv.command == nullptr);
  CHECK(parse_err({}).find("no command") != std::string::npos);
}

TEST_CASE("help GROUP [VERB] is GROUP [VERB] --help") {
  auto inv = parse_ok({"help"});
  CHECK((inv.global.help && inv.group.empty() && inv.command == nullptr));
  inv = parse_ok({"help", "workspace"});
  CHECK((inv.global.help && inv.group == "workspace" && inv.command == nullptr));
  inv = parse_ok({"help", "egress", "create"});
  CHECK(inv.global.help);
  REQUIRE(inv.command != nullptr);
  CHECK(inv.command->verb == "create");
  inv = parse_ok({"help", "completion"});
  CHECK((inv.global.help && inv.builtin != nullptr && inv.builtin->name == "completion"));
  CHECK(parse_err({"help", "egres"}) == "unknown command 'egres'; did you mean 'egress'?");
}

TEST_CASE("completion takes one shell") {
  const auto inv = parse_ok({"completion", "zsh"});
  REQUIRE(inv.builtin != nullptr);
  CHECK(inv.positional == "zsh");
  CHECK(parse_err({"completion"}) == "missing SHELL (bash, zsh or fish)");
  CHECK(parse_err({"completion", "bash", "zsh"}) == "unexpected argument 'zsh'");
}

TEST_CASE("required flags and the positional ID are enforced") {
  CHECK(parse_err({"egress", "create"}) == "missing required flag --address");
  CHECK(parse_err({"egress", "get"}) == "missing EGRESS_ID");
  CHECK(parse_err({"workspace", "update-policy", "w1", "--policy", "p"}) ==
        "missing required flag --expected-revision");
  CHECK(parse_err({"workspace", "create", "--netns", "/run/netns/x"}) == "missing required flag --policy");
}

TEST_CASE("a flag that needs a value must get one") {
  CHECK(parse_err({"egress", "create", "--address"}).find("needs a value") != std::string::npos);
  CHECK(parse_err({"egress", "create", "--address", "a:1", "--tls=yes"}).find("takes no value") != std::string::npos);
}

TEST_CASE("a single-valued flag given twice is refused, repeatable ones are not") {
  CHECK(parse_err({"egress", "create", "--address", "a:1", "--address", "b:2"}).find("twice") != std::string::npos);
  CHECK(parse_ok({"egress", "create", "--address", "a:1", "--label", "a=1", "--label", "b=2"}).values.size() == 3);
}

TEST_CASE("the password is never a flag value: only --password-file exists") {
  CHECK(parse_err({"egress", "create", "--address", "a:1", "--password", "s3cret"}).find("unknown flag") !=
        std::string::npos);
}

TEST_CASE("extra positional arguments are refused") {
  CHECK(parse_err({"egress", "get", "a", "b"}).find("unexpected argument 'b'") != std::string::npos);
  CHECK(parse_err({"egress", "list", "x"}).find("unexpected argument") != std::string::npos);
}

TEST_CASE("--command-id applies to writes, --all to lists") {
  CHECK(parse_ok({"egress", "delete", "e1", "--command-id", "c1"}).global.command_id == "c1");
  CHECK(parse_err({"egress", "get", "e1", "--command-id", "c1"}).find("writes only") != std::string::npos);
  CHECK(parse_ok({"egress", "list", "--all"}).global.all);
  CHECK(parse_err({"egress", "get", "e1", "--all"}).find("unknown flag") != std::string::npos);
}

TEST_CASE("output format must be table, json, yaml or id") {
  CHECK(parse_err({"agent", "-o", "xml"}).find("table, json, yaml or id") != std::string::npos);
}

TEST_CASE("--server needs a client certificate and key") {
  CHECK(parse_err({"agent", "--server", "h:1"}).find("--cert and --key") != std::string::npos);
  auto inv = parse_ok({"agent", "--server", "h:1", "--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem"});
  CHECK(inv.global.server == "h:1");
  CHECK(inv.global.ca == "ca.pem");
}

TEST_CASE("--help and --version need no command") {
  CHECK(parse_ok({"--version"}).global.version);
  CHECK(parse_ok({"--help"}).global.help);
  CHECK(parse_ok({"egress", "--help"}).group == "egress");
}

TEST_CASE("--watch belongs to workspace connections, which pages and needs a Workspace") {
  const auto inv = parse_ok({"workspace", "connections", "ws-1", "--watch", "--all"});
  CHECK(inv.global.watch);
  CHECK(inv.global.all);
  CHECK(inv.positional == "ws-1");
  CHECK(parse_err({"workspace", "list", "--watch"}).find("unknown flag") != std::string::npos);
  CHECK(parse_err({"workspace", "connections", "--watch"}).find("missing WORKSPACE_ID") != std::string::npos);
}

TEST_CASE("-oVALUE is -o VALUE") {
  CHECK(parse_ok({"egress", "list", "-oyaml"}).global.output == OutputFormat::yaml);
  CHECK(parse_ok({"egress", "list", "-o", "json"}).global.output == OutputFormat::json);
  CHECK(parse_err({"egress", "list", "-oxml"}).find("xml") != std::string::npos);
  CHECK(parse_err({"egress", "list", "-x"}).find("unknown flag") != std::string::npos);
}
