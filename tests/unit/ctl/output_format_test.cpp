#include <doctest/doctest.h>

#include <algorithm>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "agent/ctl/message_file.h"
#include "agent/ctl/output_format.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

using namespace kib::ctl;
namespace v1 = kibotos::ctrl::v1;

namespace {
v1::Egress sample_egress(const std::string& id, const std::string& address) {
  v1::Egress e;
  e.set_egress_id(id);
  e.mutable_spec()->mutable_socks5()->set_address(address);
  e.set_revision(3);
  (*e.mutable_labels())["team"] = std::string(1, 'b');  // not = "b": GCC 12 -Wrestrict false positive (PR 105329)
  (*e.mutable_labels())["env"] = "prod";
  return e;
}
}  // namespace

TEST_CASE("a list renders as a table with one row per item, columns aligned") {
  v1::ListEgressesResponse r;
  *r.add_egresses() = sample_egress("eg-1", "proxy.example:1080");
  *r.add_egresses() = sample_egress("eg-long-id", "p:1");
  r.mutable_egresses(1)->mutable_spec()->mutable_socks5()->mutable_tls();
  const std::string t = to_table(r);
  CHECK(t ==
        "EGRESS ID    ADDRESS              AUTH   TLS   UDP   REVISION   LABELS\n"
        "eg-1         proxy.example:1080   no     no    no    3          env=prod,team=b\n"
        "eg-long-id   p:1                  no     yes   no    3          env=prod,team=b\n");
}

TEST_CASE("an empty list prints the header only") {
  v1::ListWorkspacesResponse r;
  const std::string t = to_table(r);
  CHECK(t.rfind("WORKSPACE ID", 0) == 0);
  CHECK(std::count(t.begin(), t.end(), '\n') == 1);
}

TEST_CASE("a next page token is shown under the table") {
  v1::ListEgressesResponse r;
  r.set_next_page_token("tok");
  CHECK(to_table(r).find("next_page_token: tok\n") != std::string::npos);
}

TEST_CASE("a single resource renders as a one-row table; empty cells show '-'") {
  v1::GetWorkspaceResponse r;
  r.mutable_workspace()->set_workspace_id("ws-1");
  r.mutable_workspace()->set_netns("/run/netns/vm1");
  r.mutable_workspace()->mutable_network_policy()->set_mode(v1::NETWORK_MODE_ISOLATED);
  r.mutable_workspace()->mutable_network_policy()->set_revision(2);
  const std::string t = to_table(r);
  CHECK(t.find("ws-1") != std::string::npos);
  CHECK(t.find("ISOLATED") != std::string::npos);
  CHECK(t.find("NETWORK_MODE_") == std::string::npos);
  CHECK(t.find(" ok ") != std::string::npos);
  CHECK(t.substr(t.size() - 2) == "-\n");  // no labels
}

TEST_CASE("the agent table shows version and uptime") {
  v1::GetAgentResponse r;
  r.mutable_agent()->set_version("1.2.3");
  r.mutable_agent()->mutable_uptime()->set_seconds(3725);
  const std::string t = to_table(r);
  CHECK(t.find("1.2.3") != std::string::npos);
  CHECK(t.find("1h2m5s") != std::string::npos);
}

TEST_CASE("workspace status selects network_policy_status and renders its entries") {
  v1::GetWorkspaceResponse r;
  auto* st = r.mutable_workspace()->mutable_network_policy_status();
  st->set_applied_revision(4);
  st->set_error("namespace gone");
  auto* e = st->add_egresses();
  e->set_egress_id("eg-1");
  e->set_applied_revision(9);
  e->set_active_connections(12);
  e->set_last_error("dial failed: connect 192.0.2.1:1080: Connection refused");
  e->mutable_last_error_time()->set_seconds(1796605323);  // 2026-12-07T01:02:03Z
  e->set_consecutive_failures(3);
  e->mutable_connections()->set_bytes_to_guest(777);
  st->mutable_connections()->set_opened(15);
  (*st->mutable_connections()->mutable_closed())["guest_closed"] = 14;
  const auto* shown = select_output(r, "workspace.network_policy_status");
  REQUIRE(shown != nullptr);
  const std::string t = to_table(*shown);
  // One "applied revision" each, under names that say whose.
  CHECK(t.find("applied_policy_revision: 4\n") == 0);
  CHECK(t.find("APPLIED REV") == std::string::npos);
  CHECK(t.find("EGRESS REV") != std::string::npos);
  CHECK(t.find("EGRESS ID") != std::string::npos);
  CHECK(t.find("eg-1") != std::string::npos);
  CHECK(t.find("777") != std::string::npos);
  CHECK(t.find("2026-12-07T01:02:03Z dial failed: connect 192.0.2.1:1080: Connection refused (3 since the "
               "last success)") != std::string::npos);
  CHECK(t.find("error: namespace gone\n") != std::string::npos);
  CHECK(t.find("connections.opened: 15\n") != std::string::npos);
  CHECK(t.find("connections.closed: guest_closed=14\n") != std::string::npos);
  v1::GetWorkspaceResponse none;
  CHECK(select_output(none, "workspace.network_policy_status") == nullptr);
}

TEST_CASE("workspace status shows DNS counters, failures by reason and one row per resolver") {
  v1::NetworkPolicyStatus st;
  auto* dns = st.mutable_dns();
  dns->set_queries(31);
  dns->set_answers(29);
  dns->set_max_in_flight(4096);
  (*dns->mutable_failures())["timeout"] = 2;
  (*dns->mutable_failures())["inflight_cap"] = 0;
  auto* r = dns->add_resolvers();
  r->set_address("192.0.2.53:53");
  r->set_transport("udp");
  r->set_egress_id("eg-7");
  r->set_state("associated");
  r->set_relay_address("198.51.100.1:40000");
  r->set_egress_revision(5);
  dns->add_resolvers()->set_address("192.0.2.54:53");
  const std::string t = to_table(st);
  CHECK(t.find("queries: 31\n") != std::string::npos);
  CHECK(t.find("answers: 29\n") != std::string::npos);
  CHECK(t.find("failures: inflight_cap=0,timeout=2\n") != std::string::npos);  // sorted by reason
  CHECK(t.find("RESOLVER") != std::string::npos);
  const auto row = t.find("192.0.2.53:53");
  REQUIRE(row != std::string::npos);
  const std::string line = t.substr(row, t.find('\n', row) - row);
  for (const char* cell : {"udp", "eg-7", "associated", "198.51.100.1:40000", "5"}) {
    CAPTURE(cell);
    CHECK(line.find(cell) != std::string::npos);
  }
  CHECK(t.find("192.0.2.54:53") != std::string::npos);
}

TEST_CASE("json output is the response's proto3 JSON") {
  v1::GetEgressResponse r;
  *r.mutable_egress() = sample_egress("eg-1", "p:1");
  const std::string j = to_json(r).value();
  v1::GetEgressResponse back;
  REQUIRE(google::protobuf::util::JsonStringToMessage(j, &back).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(back, r));
  CHECK(j.find("\"egressId\"") != std::string::npos);
  CHECK(j.back() == '\n');
}

TEST_CASE("yaml output carries the same content as the JSON") {
  v1::GetEgressResponse r;
  *r.mutable_egress() = sample_egress("eg-1", "p:1");
  (*r.mutable_egress()->mutable_labels())["flag"] = "true";  // must stay a string
  r.mutable_egress()->mutable_spec()->mutable_socks5()->mutable_tls()->set_ca_cert("-----BEGIN-----\nAAA\n");
  const std::string y = to_yaml(r).value();
  CHECK(y.find("egressId: eg-1") != std::string::npos);
  v1::GetEgressResponse back;
  REQUIRE(parse_message_text(y, "yaml", back).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(back, r));
}

TEST_CASE("an empty response is {} in json and nothing in a table") {
  v1::DeleteEgressResponse r;
  CHECK(to_json(r).value() == "{}\n");
  CHECK(to_table(r).empty());
}

TEST_CASE("live connections render one row each: state without its prefix, age in ms below a second") {
  v1::ListConnectionsResponse r;
  auto* c = r.add_connections();
  c->set_connection_id(7);
  c->set_state(v1::CONNECTION_STATE_DRAINING);
  c->set_age_ms(62'500);
  c->set_guest_address("10.0.0.2:41234");
  c->set_original_destination("[2001:db8::1]:443");
  c->set_egress_id("eg-1");
  c->set_egress_revision(2);
  c->set_bytes_from_guest(10);
  c->set_bytes_to_guest(2048);
  auto* d = r.add_connections();
  d->set_connection_id(8);
  d->set_state(v1::CONNECTION_STATE_DIALING);
  d->set_age_ms(350);
  CHECK(to_table(r) ==
        "ID   STATE      AGE     GUEST            DESTINATION         EGRESS ID   EGRESS REV   FROM GUEST   TO GUEST\n"
        "7    DRAINING   1m2s    10.0.0.2:41234   [2001:db8::1]:443   eg-1        2            10           2048\n"
        "8    DIALING    350ms   -                -                   -           0            0            0\n");
}

TEST_CASE("an empty list is [] in json and yaml, not left out") {
  v1::ListEgressesResponse r;
  CHECK(to_json(r).value() == "{\n  \"egresses\": []\n}\n");
  CHECK(to_yaml(r).value() == "egresses: []\n");
  v1::GetWorkspaceResponse w;  // nested: a policy without resolvers, a route without ports
  w.mutable_workspace()->set_workspace_id("ws-1");
  w.mutable_workspace()->mutable_network_policy()->add_egresses()->set_egress_id("eg-1");
  const std::string j = to_json(w).value();
  CHECK(j.find("\"resolvers\": []") != std::string::npos);
  CHECK(j.find("\"ports\": []") != std::string::npos);
  CHECK(j.find("\"egressId\": \"eg-1\"") != std::string::npos);
  CHECK(j.find("\"labels\"") == std::string::npos);  // maps stay as proto3 JSON prints them
  v1::GetWorkspaceResponse back;
  REQUIRE(google::protobuf::util::JsonStringToMessage(j, &back).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(back, w));
}

TEST_CASE("json and yaml keep the fields in declaration order, timestamps as strings") {
  v1::GetEgressResponse r;
  *r.mutable_egress() = sample_egress("eg-1", "p:1");
  r.mutable_egress()->mutable_created_at()->set_seconds(1);
  const std::string j = to_json(r).value();
  CHECK(j.find("\"egressId\"") < j.find("\"spec\""));
  CHECK(j.find("\"spec\"") < j.find("\"revision\""));
  CHECK(j.find("\"createdAt\": \"1970-01-01T00:00:01Z\"") != std::string::npos);
  CHECK(j.find("\"revision\": \"3\"") != std::string::npos);  // uint64 stays a JSON string
}
