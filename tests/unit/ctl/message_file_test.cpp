#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "agent/ctl/ctl_main.h"
#include "agent/ctl/input_file.h"
#include "agent/ctl/message_file.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

using namespace kib::ctl;
namespace v1 = kibotos::ctrl::v1;

TEST_CASE("a YAML policy in proto3 JSON field names becomes a NetworkPolicy") {
  const char* yaml = R"(
mode: NETWORK_MODE_PUBLIC_INTERNET
egresses:
  - egressId: eg-1
    destinations: [10.0.0.0/8, "::/0"]
    ports:
      - {first: 80, last: 80}
      - first: 443
        last: 443
resolvers:
  - udp: {address: "10.0.0.53:53"}
    egressId: eg-1
  - tcp:
      address: 192.0.2.1:53
)";
  v1::NetworkPolicy p;
  auto st = parse_message_text(yaml, "p.yaml", p);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
  CHECK(p.mode() == v1::NETWORK_MODE_PUBLIC_INTERNET);
  REQUIRE(p.egresses_size() == 1);
  CHECK(p.egresses(0).egress_id() == "eg-1");
  REQUIRE(p.egresses(0).destinations_size() == 2);
  CHECK(p.egresses(0).destinations(1) == "::/0");
  REQUIRE(p.egresses(0).ports_size() == 2);
  CHECK(p.egresses(0).ports(1).first() == 443);
  REQUIRE(p.resolvers_size() == 2);
  CHECK(p.resolvers(0).udp().address() == "10.0.0.53:53");
  CHECK(p.resolvers(0).egress_id() == "eg-1");
  CHECK(p.resolvers(1).tcp().address() == "192.0.2.1:53");
}

TEST_CASE("the proto field names (snake_case) are accepted too") {
  v1::NetworkPolicy p;
  REQUIRE(parse_message_text("egresses: [{egress_id: e}]\n", "p", p).ok());
  CHECK(p.egresses(0).egress_id() == "e");
}

TEST_CASE("a JSON policy file is read the same way") {
  v1::NetworkPolicy p;
  REQUIRE(parse_message_text(
              R"({"mode":"NETWORK_MODE_ISOLATED","egresses":[{"egressId":"e","ports":[{"first":1,"last":2}]}]})",
              "p.json", p)
              .ok());
  CHECK(p.mode() == v1::NETWORK_MODE_ISOLATED);
  CHECK(p.egresses(0).ports(0).last() == 2);
}

TEST_CASE("JSON with a key longer than YAML allows (1024 characters) is still read") {
  // Found by tests/fuzz/ctl_message_file_fuzz.cpp: what kibotosctl printed, it could not read.
  const std::string key(1100, 'k');
  v1::CreateWorkspaceRequest r;
  REQUIRE(parse_message_text(R"({"netns":"/run/netns/g","labels":{")" + key + R"(":"v"}})", "w.json", r).ok());
  CHECK(r.labels().at(key) == "v");
  CHECK_FALSE(parse_message_text("labels: {" + key + ": v\n", "w.yaml", r).ok());  // broken YAML stays refused
}

TEST_CASE("unknown fields in a policy are refused, naming the field") {
  v1::NetworkPolicy p;
  auto st = parse_message_text("mode: NETWORK_MODE_ISOLATED\negresess: []\n", "p.yaml", p);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == kib::Code::invalid_argument);
  CHECK(st.error().message.find("egresess") != std::string::npos);
  CHECK(st.error().message.rfind("p.yaml:2:1: unknown field 'egresess'; valid: ", 0) == 0);
}

TEST_CASE("bad enum names and malformed YAML are refused") {
  v1::NetworkPolicy p;
  CHECK_FALSE(parse_message_text("mode: OPEN\n", "p", p).ok());
  auto st = parse_message_text("mode: [unclosed\n", "p", p);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("invalid YAML") != std::string::npos);
  CHECK_FALSE(parse_message_text("", "p", p).ok());
}

TEST_CASE("quoted YAML scalars stay strings, plain numbers stay numbers") {
  CHECK(yaml_to_json("a: '80'\nb: 80\nc: true\nd: \"true\"\ne: ~\nf: x\n").value() ==
        R"({"a":"80","b":80,"c":true,"d":"true","e":null,"f":"x"})");
}

TEST_CASE("strings are escaped for JSON") {
  CHECK(yaml_to_json("a: \"q\\\"\\\\\\n\\t\\x01\"\n").value() == R"({"a":"q\"\\\n\t\u0001"})");
}

namespace {

// A policy file on disk, removed with its directory at the end of the test.
class PolicyFile {
 public:
  PolicyFile(const std::string& name, const std::string& text) {
    char dir[] = "/tmp/kibotosctl-policy-XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/" + name;
    std::ofstream(path_) << text;
  }
  ~PolicyFile() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

  // The error parse_message_text reports for the file, after the file's path; "" if it parses.
  std::string error_after_path(v1::NetworkPolicy& p) const {
    auto text = kib::ctl::read_input(path_);
    REQUIRE(text.ok());
    auto st = parse_message_text(*text, path_, p);
    if (st.ok()) return "";
    const std::string& m = st.error().message;
    REQUIRE(m.rfind(path_, 0) == 0);
    return m.substr(path_.size());
  }

 private:
  std::string dir_, path_;
};

std::string error_of(const std::string& name, const std::string& text) {
  PolicyFile f(name, text);
  v1::NetworkPolicy p;
  return f.error_after_path(p);
}

}  // namespace

TEST_CASE("policy file: a YAML syntax error says line and column") {
  CHECK(error_of("p.yaml", "mode: ISOLATED\negresses: [ {egressId: e\n").rfind(":3:1: invalid YAML: ", 0) == 0);
}

TEST_CASE("policy file: an unknown field says where and lists the valid ones") {
  CHECK(error_of("p.yaml", "mode: PUBLIC_INTERNET\n\negress:\n  - egressId: e\n") ==
        ":3:1: unknown field 'egress'; valid: revision, mode, egresses, resolvers");
  CHECK(error_of("p.yaml", "egresses:\n  - egressId: e\n    port: []\n") ==
        ":3:5: unknown field 'port' in egresses[0]; valid: egressId, destinations, ports");
}

TEST_CASE("policy file: a bad enum value lists the valid short names") {
  CHECK(error_of("p.yaml", "mode: OPEN\n") ==
        ":1:7: mode: 'OPEN' is not a NetworkMode; valid: ISOLATED, PUBLIC_INTERNET");
}

TEST_CASE("policy file: short enum names, as tables and the agent's messages write them, are accepted") {
  for (const char* mode : {"PUBLIC_INTERNET", "public_internet", "NETWORK_MODE_PUBLIC_INTERNET", "2"}) {
    PolicyFile f("p.yaml", std::string("mode: ") + mode + "\n");
    v1::NetworkPolicy p;
    CHECK(f.error_after_path(p) == "");
    CHECK(p.mode() == v1::NETWORK_MODE_PUBLIC_INTERNET);
  }
}

TEST_CASE("policy file: a value of the wrong shape or type says which field and what it expects") {
  CHECK(error_of("p.yaml", "egresses:\n  egressId: e\n") == ":2:3: egresses: expected a list, got a mapping");
  CHECK(error_of("p.yaml", "egresses:\n  - egressId: e\n    ports: [{first: http}]\n") ==
        ":3:21: egresses[0].ports[0].first: expected a whole number from 0 to 4294967295, got 'http'");
  CHECK(error_of("p.yaml", "egresses: [{ports: [{first: 4294967296}]}]\n") ==
        ":1:29: egresses[0].ports[0].first: expected a whole number from 0 to 4294967295, got '4294967296'");
  CHECK(error_of("p.yaml", "mode: [ISOLATED]\n") == ":1:7: mode: expected a single value, got a list");
}

TEST_CASE("policy file: two members of a oneof, or one field twice, are refused where they are") {
  CHECK(error_of("p.yaml", "resolvers:\n  - udp: {address: '10.0.0.53:53'}\n    tcp: {address: '10.0.0.53:53'}\n") ==
        ":3:5: resolvers[0]: 'udp' and 'tcp' are both set; a Resolver takes one of them");
  CHECK(error_of("p.yaml", "mode: ISOLATED\nmode: PUBLIC_INTERNET\n") == ":2:1: field 'mode' given twice");
}

TEST_CASE("policy file: JSON errors carry line and column too") {
  CHECK(error_of("p.json", "{\n  \"mode\": \"ISOLATED\",\n  \"egressess\": []\n}\n") ==
        ":3:3: unknown field 'egressess'; valid: revision, mode, egresses, resolvers");
}

TEST_CASE("policy file: a string field takes a plain scalar YAML would read as a number") {
  PolicyFile f("p.yaml", "egresses: [{egressId: 123, destinations: [10.0.0.0/8]}]\n");
  v1::NetworkPolicy p;
  CHECK(f.error_after_path(p) == "");
  CHECK(p.egresses(0).egress_id() == "123");
}

TEST_CASE("kibotosctl reports a policy file's error with its place, before contacting the agent") {
  PolicyFile f("policy.yaml", "mode: ISOLATED\negress: []\n");
  std::ostringstream out, err;
  CHECK(kib::ctl::run_ctl({"workspace", "create", "--netns", "g", "--policy", f.path(), "--socket", "/nonexistent"},
                          out, err, nullptr) == 2);
  CHECK(err.str() == "error: invalid_argument: " + f.path() +
                         ":2:1: unknown field 'egress'; valid: revision, mode, egresses, resolvers\n");
}
