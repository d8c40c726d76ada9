#include <doctest/doctest.h>

#include <map>

#include "agent/ctl/cli_args.h"
#include "agent/ctl/request_builder.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

using namespace kib::ctl;
namespace v1 = kibotos::ctrl::v1;

namespace {
// Files are served from memory so the tests touch no disk.
FileReader files(std::map<std::string, std::string> contents) {
  return [contents](const std::string& path) -> kib::Result<std::string> {
    auto it = contents.find(path);
    if (it == contents.end()) return kib::Error{kib::Code::invalid_argument, "cannot read " + path};
    return it->second;
  };
}
std::string fixed_id() { return "fresh-id"; }

kib::Status build(std::vector<std::string> args, google::protobuf::Message& req, FileReader read = files({})) {
  auto inv = parse_args(args, nullptr);
  REQUIRE(inv.ok());
  return build_request(*inv, req, read, fixed_id);
}
}  // namespace

TEST_CASE("egress create fills the spec from flags") {
  v1::CreateEgressRequest req;
  REQUIRE(build({"egress", "create", "--address", "proxy.example:1080", "--username", "u", "--password-file", "pw",
                 "--server-name", "sni.example", "--ca-cert", "ca.pem", "--udp-enabled", "--label", "team=a",
                 "--annotation", "note=x=y"},
                req, files({{"pw", "s3cret\n"}, {"ca.pem", "PEM\n"}}))
              .ok());
  CHECK(req.spec().socks5().address() == "proxy.example:1080");
  CHECK(req.spec().socks5().username() == "u");
  CHECK(req.spec().socks5().tls().server_name() == "sni.example");
  CHECK(req.spec().socks5().tls().ca_cert() == "PEM\n");
  CHECK(req.spec().udp_enabled());
  CHECK(req.labels().at("team") == "a");
  CHECK(req.annotations().at("note") == "x=y");
}

TEST_CASE("the password is read from its file with the trailing newline removed") {
  v1::CreateEgressRequest req;
  REQUIRE(build({"egress", "create", "--address", "a:1", "--password-file", "-"}, req, files({{"-", "pw\r\n"}})).ok());
  CHECK(req.spec().socks5().password() == "pw");
}

TEST_CASE("--tls alone selects TLS with defaults; without it there is no tls") {
  v1::CreateEgressRequest with, without;
  REQUIRE(build({"egress", "create", "--address", "a:1", "--tls"}, with).ok());
  REQUIRE(build({"egress", "create", "--address", "a:1"}, without).ok());
  CHECK(with.spec().socks5().has_tls());
  CHECK_FALSE(without.spec().socks5().has_tls());
}

TEST_CASE("a write gets a fresh command ID unless --command-id is given") {
  v1::DeleteEgressRequest fresh, given;
  REQUIRE(build({"egress", "delete", "e1"}, fresh).ok());
  REQUIRE(build({"egress", "delete", "e1", "--command-id", "retry-7"}, given).ok());
  CHECK(fresh.command_id() == "fresh-id");
  CHECK(fresh.egress_id() == "e1");
  CHECK(given.command_id() == "retry-7");
}

TEST_CASE("a read carries no command ID") {
  v1::GetEgressRequest req;
  REQUIRE(build({"egress", "get", "e1"}, req).ok());
  CHECK(req.egress_id() == "e1");
}

TEST_CASE("update takes expected revision and optional drain seconds") {
  v1::UpdateEgressRequest req, no_drain;
  REQUIRE(build({"egress", "update", "e1", "--expected-revision", "7", "--address", "a:1", "--drain-seconds", "0"}, req)
              .ok());
  CHECK(req.expected_revision() == 7);
  REQUIRE(req.has_drain_seconds());
  CHECK(req.drain_seconds() == 0);
  REQUIRE(build({"egress", "update", "e1", "--expected-revision", "7", "--address", "a:1"}, no_drain).ok());
  CHECK_FALSE(no_drain.has_drain_seconds());
}

TEST_CASE("numbers are checked") {
  v1::UpdateEgressRequest req;
  CHECK_FALSE(build({"egress", "update", "e1", "--expected-revision", "x", "--address", "a:1"}, req).ok());
  CHECK_FALSE(build({"egress", "update", "e1", "--expected-revision", "-1", "--address", "a:1"}, req).ok());
  CHECK_FALSE(
      build({"egress", "update", "e1", "--expected-revision", "1", "--address", "a:1", "--drain-seconds", "4294967296"},
            req)
          .ok());
}

TEST_CASE("labels must be key=value and keys unique") {
  v1::CreateEgressRequest req;
  CHECK_FALSE(build({"egress", "create", "--address", "a:1", "--label", "novalue"}, req).ok());
  v1::CreateEgressRequest dup;
  auto st = build({"egress", "create", "--address", "a:1", "--label", "k=1", "--label", "k=2"}, dup);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("twice") != std::string::npos);
  v1::CreateEgressRequest empty_value;
  REQUIRE(build({"egress", "create", "--address", "a:1", "--label", "k="}, empty_value).ok());
  CHECK(empty_value.labels().at("k").empty());
}

TEST_CASE("label and annotate set the whole map under its own revision") {
  v1::UpdateEgressLabelsRequest req;
  REQUIRE(build({"egress", "label", "e1", "--expected-revision", "3", "--label", "a=1"}, req).ok());
  CHECK(req.expected_labels_revision() == 3);
  CHECK(req.labels().size() == 1);
  v1::UpdateWorkspaceAnnotationsRequest ann;
  REQUIRE(build({"workspace", "annotate", "w1", "--expected-revision", "2", "--annotation", "a=b c"}, ann).ok());
  CHECK(ann.expected_annotations_revision() == 2);
  CHECK(ann.annotations().at("a") == "b c");
}

TEST_CASE("list flags fill page size, token and selector") {
  v1::ListEgressesRequest req;
  REQUIRE(build({"egress", "list", "--page-size", "10", "--page-token", "t", "--selector", "a=b"}, req).ok());
  CHECK(req.page_size() == 10);
  CHECK(req.page_token() == "t");
  CHECK(req.label_selector().at("a") == "b");
}

TEST_CASE("workspace create reads the policy file") {
  v1::CreateWorkspaceRequest req;
  REQUIRE(build({"workspace", "create", "--netns", "/run/netns/vm1", "--policy", "p.yaml"}, req,
                files({{"p.yaml", "mode: NETWORK_MODE_ISOLATED\n"}}))
              .ok());
  CHECK(req.netns() == "/run/netns/vm1");
  CHECK(req.network_policy().mode() == v1::NETWORK_MODE_ISOLATED);
  CHECK(req.command_id() == "fresh-id");
}

TEST_CASE("an unreadable file names the flag") {
  v1::CreateEgressRequest req;
  auto st = build({"egress", "create", "--address", "a:1", "--password-file", "missing"}, req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.rfind("--password-file: ", 0) == 0);
}

TEST_CASE("--netns takes a path as it is and a bare name as the path ip netns gives it") {
  v1::CreateWorkspaceRequest by_name, by_path;
  const auto policy = files({{"p.yaml", "mode: NETWORK_MODE_ISOLATED\n"}});
  REQUIRE(build({"workspace", "create", "--netns", "vm1", "--policy", "p.yaml"}, by_name, policy).ok());
  REQUIRE(build({"workspace", "create", "--netns", "/proc/42/ns/net", "--policy", "p.yaml"}, by_path, policy).ok());
  CHECK(by_name.netns() == "/run/netns/vm1");
  CHECK(by_path.netns() == "/proc/42/ns/net");
}
