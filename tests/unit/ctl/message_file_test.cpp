#include <doctest/doctest.h>

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
  CHECK(st.error().message.rfind("p.yaml: ", 0) == 0);
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
