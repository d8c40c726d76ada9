// EgressService: one test case per rule of the reference (seed) and API.md.
#include <sqlite3.h>

#include <set>

#include "tests/unit/services/service_harness.h"
#include "tests/unit/services/test_cert.h"

using namespace kib;
using namespace kib::test;

namespace {

ctrl::Egress must_create(Harness& h, const ctrl::EgressSpec& spec) {
  auto r = h.create_egress(spec);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return r->egress();
}

}  // namespace

TEST_CASE("CreateEgress: stores revision 1, created_at equals updated_at, and returns the stored Egress") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK(e.revision() == 1);
  CHECK(e.egress_id().rfind("eg-", 0) == 0);
  CHECK(e.created_at().seconds() == 1'700'000'000);
  CHECK(e.created_at().SerializeAsString() == e.updated_at().SerializeAsString());
  auto got = h.get_egress(e.egress_id());
  REQUIRE(got.ok());
  CHECK(got->egress().SerializeAsString() == e.SerializeAsString());
}

TEST_CASE("CreateEgress: a spec without a protocol branch is invalid_argument") {
  Harness h;
  ctrl::EgressSpec none;
  none.set_udp_enabled(true);
  CHECK(code_of(h.create_egress(none)) == Code::invalid_argument);
}

TEST_CASE("UpdateEgress: a spec without a protocol branch is invalid_argument") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK(code_of(h.update_egress(e.egress_id(), 1, ctrl::EgressSpec())) == Code::invalid_argument);
}

TEST_CASE("Reads return the selected protocol branch") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  auto got = h.get_egress(e.egress_id());
  REQUIRE(got.ok());
  CHECK(got->egress().spec().has_socks5());
  CHECK(got->egress().spec().socks5().address() == "203.0.113.5:1080");
}

TEST_CASE("Endpoint checks: address is host:port with a port from 1 to 65535") {
  Harness h;
  for (std::string bad :
       std::vector<std::string>{"", "203.0.113.5", "203.0.113.5:0", "203.0.113.5:65536", "[2001:4860::1", "bad host:80",
                                "a..b:80", std::string(254, 'a') + ":80", "-a.example:80"}) {
    CAPTURE(bad);
    CHECK(code_of(h.create_egress(socks5(bad))) == Code::invalid_argument);
  }
  CHECK(h.create_egress(socks5("203.0.113.5:1")).ok());
  CHECK(h.create_egress(socks5("203.0.113.5:65535")).ok());
  CHECK(h.create_egress(socks5("[2001:4860::1]:1080")).ok());
  CHECK(h.create_egress(socks5("proxy.example:1080")).ok());
}

TEST_CASE("Endpoint checks: an IP literal in a special-purpose range is invalid_argument") {
  Harness h;
  for (const char* bad : {"10.0.0.1:1080", "127.0.0.1:1080", "192.168.1.1:1080", "100.64.0.1:1080", "169.254.1.1:1080",
                          "198.51.100.1:1080", "224.0.0.1:1080", "0.0.0.0:1080", "[::1]:1080", "[fc00::1]:1080",
                          "[fe80::1]:1080", "[::ffff:10.0.0.1]:1080", "[64:ff9b::a00:1]:1080", "[2002::1]:1080",
                          "[2001:0::1]:1080", "[2001:db8::1]:1080"}) {
    CAPTURE(bad);
    CHECK(code_of(h.create_egress(socks5(bad))) == Code::invalid_argument);
  }
}

TEST_CASE("Endpoint checks: egress.allowed_special_purpose_cidrs exempts a range") {
  Harness h;  // the harness exempts 203.0.113.0/24 only
  CHECK(h.create_egress(socks5("203.0.113.200:1080")).ok());
  CHECK(code_of(h.create_egress(socks5("198.51.100.1:1080"))) == Code::invalid_argument);
}

TEST_CASE("Endpoint checks: a hostname that resolves into a special-purpose range is invalid_argument") {
  Harness h;
  CHECK(code_of(h.create_egress(socks5("mixed.example:1080"))) == Code::invalid_argument);
  CHECK(code_of(h.create_egress(socks5("loopback.example:1080"))) == Code::invalid_argument);
  auto e = must_create(h, socks5("proxy.example:1080"));
  CHECK(code_of(h.update_egress(e.egress_id(), 1, socks5("mixed.example:1080"))) == Code::invalid_argument);
}

TEST_CASE("Endpoint checks: a hostname that does not resolve is accepted") {
  Harness h;
  CHECK(h.create_egress(socks5("nxdomain.example:1080")).ok());
}

TEST_CASE("Endpoint checks: the server resolves a hostname once per write, an IP literal never") {
  Harness h;
  must_create(h, socks5("proxy.example:1080"));
  CHECK(h.resolver.calls == 1);
  must_create(h, socks5("203.0.113.5:1080"));
  CHECK(h.resolver.calls == 1);
}

TEST_CASE("Endpoint checks: the real resolver (c-ares) refuses a name that resolves to loopback") {
  Harness h(/*real_resolver=*/true);
  // localhost comes from /etc/hosts: no packet leaves the machine.
  CHECK(code_of(h.create_egress(socks5("localhost:1080"))) == Code::invalid_argument);
}

TEST_CASE("Credentials: username and password are each 1 to 255 bytes") {
  Harness h;
  std::string max(255, 'u'), over(256, 'u');
  CHECK(h.create_egress(socks5("203.0.113.5:1080", max, max)).ok());
  CHECK(h.create_egress(socks5("203.0.113.5:1080", "u", "p")).ok());
  CHECK(code_of(h.create_egress(socks5("203.0.113.5:1080", over, "p"))) == Code::invalid_argument);
  CHECK(code_of(h.create_egress(socks5("203.0.113.5:1080", "u", over))) == Code::invalid_argument);
}

TEST_CASE("Credentials: a username without a password, or the reverse, is invalid_argument") {
  Harness h;
  CHECK(code_of(h.create_egress(socks5("203.0.113.5:1080", "user", ""))) == Code::invalid_argument);
  CHECK(code_of(h.create_egress(socks5("203.0.113.5:1080", "", "secret"))) == Code::invalid_argument);
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK(code_of(h.update_egress(e.egress_id(), 1, socks5("203.0.113.5:1080", "user", ""))) == Code::invalid_argument);
}

TEST_CASE("Password is write-only: no create, get, list or update response returns it, nor the command log") {
  Harness h;
  const std::string pw = "hunter2-very-secret";
  auto c = h.create_egress(socks5("203.0.113.5:1080", "alice", pw));
  REQUIRE(c.ok());
  CHECK(c->egress().spec().socks5().password().empty());
  CHECK(c->egress().spec().socks5().username() == "alice");
  auto g = h.get_egress(c->egress().egress_id());
  REQUIRE(g.ok());
  CHECK(g->egress().spec().socks5().password().empty());
  auto l = h.list(ctrl::ListEgressesRequest());
  REQUIRE(l.ok());
  REQUIRE(l->egresses_size() == 1);
  CHECK(l->egresses(0).spec().socks5().password().empty());
  auto u = h.update_egress(c->egress().egress_id(), 1, socks5("203.0.113.6:1080", "alice", pw + "2"));
  REQUIRE(u.ok());
  CHECK(u->egress().spec().socks5().password().empty());
  CHECK(u->DebugString().find(pw) == std::string::npos);

  // The stored outcomes of the command log hold the responses: no password either.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2((h.config.state_dir + "/state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT response, message FROM commands", -1, &st, nullptr) == SQLITE_OK);
  int rows = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    ++rows;
    std::string resp(static_cast<const char*>(sqlite3_column_blob(st, 0)), sqlite3_column_bytes(st, 0));
    CHECK(resp.find(pw) == std::string::npos);
  }
  CHECK(rows == 2);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_CASE("Password: the runtime receives it, since the data plane authenticates with it") {
  Harness h;
  must_create(h, socks5("203.0.113.5:1080", "alice", "pw1"));
  REQUIRE(h.runtime.last_published());
  CHECK(h.runtime.last_published()->spec.socks5().password() == "pw1");
}

TEST_CASE("Password: an update must send it again; an update without it stores none") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080", "alice", "pw1"));
  ctrl::EgressSpec no_creds = socks5("203.0.113.5:1080");
  auto u = h.update_egress(e.egress_id(), 1, no_creds);
  REQUIRE(u.ok());
  CHECK(u->egress().revision() == 2);
  CHECK(u->egress().spec().socks5().username().empty());
  CHECK(h.runtime.last_published()->spec.socks5().password().empty());
}

TEST_CASE("TLS: ca_cert must be PEM with at least one certificate, else invalid_argument") {
  Harness h;
  auto spec = socks5("203.0.113.5:1080");
  auto* tls = spec.mutable_socks5()->mutable_tls();
  tls->set_ca_cert("not a certificate");
  CHECK(code_of(h.create_egress(spec)) == Code::invalid_argument);
  tls->set_ca_cert("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  CHECK(code_of(h.create_egress(spec)) == Code::invalid_argument);
  std::string pem = make_self_signed_pem();
  tls->set_ca_cert(pem);
  CHECK(h.create_egress(spec).ok());
  tls->set_ca_cert(pem + pem);  // a bundle
  CHECK(h.create_egress(spec).ok());
  tls->set_ca_cert(pem + "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n");
  CHECK(code_of(h.create_egress(spec)) == Code::invalid_argument);
}

TEST_CASE("TLS: ca_cert is at most 64 KiB") {
  Harness h;
  std::string pem = make_self_signed_pem();
  std::string big;
  while (big.size() + pem.size() <= 64 * 1024) big += pem;
  auto spec = socks5("203.0.113.5:1080");
  spec.mutable_socks5()->mutable_tls()->set_ca_cert(big);
  CHECK(h.create_egress(spec).ok());
  big += pem;
  spec.mutable_socks5()->mutable_tls()->set_ca_cert(big);
  CHECK(code_of(h.create_egress(spec)) == Code::invalid_argument);
}

TEST_CASE("TLS: an empty server_name is accepted (it selects the host of address) and read back as given") {
  Harness h;
  auto spec = socks5("proxy.example:1080");
  spec.mutable_socks5()->mutable_tls();
  auto e = must_create(h, spec);
  CHECK(e.spec().socks5().has_tls());
  CHECK(e.spec().socks5().tls().server_name().empty());
  spec.mutable_socks5()->mutable_tls()->set_server_name("bad name!");
  CHECK(code_of(h.create_egress(spec)) == Code::invalid_argument);
}

TEST_CASE("udp_enabled defaults to off") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK_FALSE(e.spec().udp_enabled());
  CHECK_FALSE(h.get_egress(e.egress_id())->egress().spec().udp_enabled());
}

TEST_CASE("GetEgress: an unknown id is not_found") {
  Harness h;
  CHECK(code_of(h.get_egress("eg-000000000000000000000000")) == Code::not_found);
  CHECK(code_of(h.get_egress("")) == Code::invalid_argument);
}

TEST_CASE("DeleteEgress: a deleted Egress is not_found to every read and every write") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  REQUIRE(h.delete_egress(e.egress_id()).ok());
  CHECK(code_of(h.get_egress(e.egress_id())) == Code::not_found);
  CHECK(h.list(ctrl::ListEgressesRequest())->egresses_size() == 0);
  CHECK(code_of(h.update_egress(e.egress_id(), 1, socks5("203.0.113.5:1080"))) == Code::not_found);
  CHECK(code_of(h.delete_egress(e.egress_id())) == Code::not_found);
  ctrl::UpdateEgressLabelsRequest l;
  l.set_command_id("labels-deleted");
  l.set_egress_id(e.egress_id());
  l.set_expected_labels_revision(1);
  CHECK(code_of(h.labels(l)) == Code::not_found);
  ctrl::UpdateEgressAnnotationsRequest a;
  a.set_command_id("annotations-deleted");
  a.set_egress_id(e.egress_id());
  a.set_expected_annotations_revision(1);
  (*a.mutable_annotations())["note"] = "x";
  CHECK(code_of(h.annotations(a)) == Code::not_found);
  CHECK(code_of(h.get_egress(e.egress_id())) == Code::not_found);
}

TEST_CASE("DeleteEgress: the runtime is told once the deletion is stored") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  h.runtime.clear();
  REQUIRE(h.delete_egress(e.egress_id()).ok());
  CHECK(h.runtime.events() == std::vector<std::string>{"egress_deleted " + e.egress_id()});
}

TEST_CASE("UpdateEgress: replaces the whole spec under the same endpoint checks") {
  Harness h;
  auto spec = socks5("203.0.113.5:1080", "alice", "pw");
  spec.set_udp_enabled(true);
  spec.mutable_socks5()->mutable_tls()->set_server_name("proxy.example");
  auto e = must_create(h, spec);
  auto u = h.update_egress(e.egress_id(), 1, socks5("proxy.example:9050"));
  REQUIRE(u.ok());
  const auto& s = u->egress().spec();
  CHECK(s.socks5().address() == "proxy.example:9050");
  CHECK(s.socks5().username().empty());
  CHECK_FALSE(s.socks5().has_tls());
  CHECK_FALSE(s.udp_enabled());
  CHECK(code_of(h.update_egress(e.egress_id(), 2, socks5("10.0.0.1:1080"))) == Code::invalid_argument);
}

TEST_CASE("UpdateEgress: expected_revision is required") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK(code_of(h.update_egress(e.egress_id(), 0, socks5("203.0.113.6:1080"))) == Code::invalid_argument);
  CHECK(h.get_egress(e.egress_id())->egress().revision() == 1);
}

TEST_CASE("UpdateEgress: a mismatched expected_revision is aborted and changes nothing") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  REQUIRE(h.update_egress(e.egress_id(), 1, socks5("203.0.113.6:1080")).ok());
  h.runtime.clear();
  CHECK(code_of(h.update_egress(e.egress_id(), 1, socks5("203.0.113.7:1080"))) == Code::aborted);
  auto g = h.get_egress(e.egress_id());
  CHECK(g->egress().revision() == 2);
  CHECK(g->egress().spec().socks5().address() == "203.0.113.6:1080");
  CHECK(h.runtime.events().empty());
}

TEST_CASE("UpdateEgress: equal content, password included, keeps the revision and updated_at") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080", "alice", "pw"));
  h.advance(std::chrono::seconds(10));
  h.runtime.clear();
  auto u = h.update_egress(e.egress_id(), 1, socks5("203.0.113.5:1080", "alice", "pw"));
  REQUIRE(u.ok());
  CHECK(u->egress().revision() == 1);
  CHECK(u->egress().updated_at().seconds() == e.updated_at().seconds());
  CHECK(h.runtime.events().empty());
}

TEST_CASE("UpdateEgress: different content, even only the password, increments the revision by one") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080", "alice", "pw"));
  h.advance(std::chrono::seconds(10));
  auto u = h.update_egress(e.egress_id(), 1, socks5("203.0.113.5:1080", "alice", "pw2"));
  REQUIRE(u.ok());
  CHECK(u->egress().revision() == 2);
  CHECK(u->egress().updated_at().seconds() == e.updated_at().seconds() + 10);
  CHECK(u->egress().created_at().seconds() == e.created_at().seconds());
  auto u2 = h.update_egress(e.egress_id(), 2, socks5("203.0.113.9:1080", "alice", "pw2"));
  REQUIRE(u2.ok());
  CHECK(u2->egress().revision() == 3);
}

TEST_CASE("UpdateEgress: after the system clock is stepped back, updated_at does not go back") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  h.advance(-std::chrono::hours(1));
  auto u = h.update_egress(e.egress_id(), 1, socks5("203.0.113.6:1080"));
  REQUIRE(u.ok());
  CHECK(u->egress().updated_at().SerializeAsString() == e.updated_at().SerializeAsString());
  CHECK(u->egress().created_at().SerializeAsString() == e.created_at().SerializeAsString());
  h.advance(std::chrono::hours(1) + std::chrono::seconds(5));
  auto u2 = h.update_egress(e.egress_id(), 2, socks5("203.0.113.7:1080"));
  REQUIRE(u2.ok());
  CHECK(u2->egress().updated_at().seconds() == e.updated_at().seconds() + 5);
}

TEST_CASE("UpdateEgress: drain_seconds is 0 to 3600, absent selects 600, anything else invalid_argument") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  ctrl::UpdateEgressRequest r;
  r.set_egress_id(e.egress_id());
  auto send = [&](uint64_t expected, const char* addr, std::optional<uint32_t> drain) {
    r.set_command_id(h.next_command_id());
    r.set_expected_revision(expected);
    *r.mutable_spec() = socks5(addr);
    if (drain)
      r.set_drain_seconds(*drain);
    else
      r.clear_drain_seconds();
    h.runtime.clear();
    return h.update(r);
  };
  REQUIRE(send(1, "203.0.113.6:1080", std::nullopt).ok());
  CHECK(h.runtime.events() == std::vector<std::string>{"egress_published " + e.egress_id() + " r2 drain 600"});
  REQUIRE(send(2, "203.0.113.7:1080", 0).ok());
  CHECK(h.runtime.events() == std::vector<std::string>{"egress_published " + e.egress_id() + " r3 drain 0"});
  REQUIRE(send(3, "203.0.113.8:1080", 3600).ok());
  CHECK(h.runtime.events() == std::vector<std::string>{"egress_published " + e.egress_id() + " r4 drain 3600"});
  CHECK(code_of(send(4, "203.0.113.9:1080", 3601)) == Code::invalid_argument);
  CHECK(h.get_egress(e.egress_id())->egress().revision() == 4);
}

TEST_CASE("UpdateEgress: drain_seconds is not stored with the Egress (it is not content)") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  ctrl::UpdateEgressRequest r;
  r.set_command_id("drain-1");
  r.set_egress_id(e.egress_id());
  r.set_expected_revision(1);
  *r.mutable_spec() = socks5("203.0.113.5:1080");
  r.set_drain_seconds(5);
  auto u = h.update(r);
  REQUIRE(u.ok());
  CHECK(u->egress().revision() == 1);  // same spec, only a drain: idempotent
}

TEST_CASE("UpdateEgress: the runtime gets the new revision, password included, once it is stored") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  CHECK(h.runtime.events() == std::vector<std::string>{"egress_published " + e.egress_id() + " r1 drain 0"});
  h.runtime.clear();
  REQUIRE(h.update_egress(e.egress_id(), 1, socks5("203.0.113.6:1080", "bob", "pw")).ok());
  auto rev = h.runtime.last_published();
  CHECK(rev->revision == 2);
  CHECK(rev->spec.socks5().password() == "pw");
}

TEST_CASE("ListEgresses: lists in creation order") {
  Harness h;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(must_create(h, socks5("203.0.113.5:1080")).egress_id());
  auto l = h.list(ctrl::ListEgressesRequest());
  REQUIRE(l.ok());
  std::vector<std::string> got;
  for (const auto& e : l->egresses()) got.push_back(e.egress_id());
  CHECK(got == ids);
  CHECK(l->next_page_token().empty());
}

TEST_CASE("ListEgresses: page_size 0 selects the server default of 100") {
  Harness h;
  for (int i = 0; i < 101; ++i) must_create(h, socks5("203.0.113.5:1080"));
  auto l = h.list(ctrl::ListEgressesRequest());
  REQUIRE(l.ok());
  CHECK(l->egresses_size() == 100);
  CHECK_FALSE(l->next_page_token().empty());
}

TEST_CASE("ListEgresses: page_size above the server maximum (1000) is rejected, not changed") {
  Harness h;
  ctrl::ListEgressesRequest r;
  r.set_page_size(1001);
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
  r.set_page_size(1000);
  CHECK(h.list(r).ok());
}

TEST_CASE("ListEgresses: a forged or altered page_token is invalid_argument") {
  Harness h;
  for (int i = 0; i < 3; ++i) must_create(h, socks5("203.0.113.5:1080"));
  ctrl::ListEgressesRequest r;
  r.set_page_size(1);
  auto first = h.list(r);
  REQUIRE(first.ok());
  std::string token = first->next_page_token();
  REQUIRE_FALSE(token.empty());
  r.set_page_token(token);
  CHECK(h.list(r).ok());
  for (size_t i = 0; i < token.size(); i += 7) {
    std::string bad = token;
    bad[i] = bad[i] == '0' ? '1' : '0';
    r.set_page_token(bad);
    CAPTURE(bad);
    CHECK(code_of(h.list(r)) == Code::invalid_argument);
  }
  for (std::string bad :
       std::vector<std::string>{"x", "0", token + "00", token.substr(2), std::string(token.size(), 'z')}) {
    r.set_page_token(bad);
    CHECK(code_of(h.list(r)) == Code::invalid_argument);
  }
}

TEST_CASE("ListEgresses: a page token is only valid with the label_selector it was issued for") {
  Harness h;
  for (int i = 0; i < 3; ++i) {
    ctrl::CreateEgressRequest c;
    c.set_command_id("sel-" + std::to_string(i));
    *c.mutable_spec() = socks5("203.0.113.5:1080");
    (*c.mutable_labels())["team"] = "a";
    REQUIRE(h.create(c).ok());
  }
  ctrl::ListEgressesRequest r;
  r.set_page_size(1);
  (*r.mutable_label_selector())["team"] = "a";
  auto first = h.list(r);
  REQUIRE(first.ok());
  r.set_page_token(first->next_page_token());
  CHECK(h.list(r).ok());
  (*r.mutable_label_selector())["team"] = "b";
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
  r.clear_label_selector();
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
  // Nor with another resource kind's list.
  ctrl::ListWorkspacesRequest w;
  w.set_page_token(first->next_page_token());
  (*w.mutable_label_selector())["team"] = "a";
  CHECK(code_of(h.call<ctrl::ListWorkspacesResponse>("kibotos.ctrl.v1.WorkspaceService/ListWorkspaces", w)) ==
        Code::invalid_argument);
}

TEST_CASE("ListEgresses: the selector keeps Egresses carrying every entry with exactly that value") {
  Harness h;
  std::vector<std::map<std::string, std::string>> label_sets = {
      {{"team", "a"}, {"tier", "gold"}}, {{"team", "a"}}, {{"team", "b"}, {"tier", "gold"}}, {}, {{"team", "A"}}};
  std::vector<std::string> ids;
  for (const auto& ls : label_sets) {
    ctrl::CreateEgressRequest c;
    c.set_command_id(h.next_command_id());
    *c.mutable_spec() = socks5("203.0.113.5:1080");
    for (const auto& [k, v] : ls) (*c.mutable_labels())[k] = v;
    ids.push_back(h.create(c)->egress().egress_id());
  }
  auto ids_of = [&](std::map<std::string, std::string> sel) {
    ctrl::ListEgressesRequest r;
    for (const auto& [k, v] : sel) (*r.mutable_label_selector())[k] = v;
    std::vector<std::string> out;
    auto l = h.list(r);
    REQUIRE(l.ok());
    for (const auto& e : l->egresses()) out.push_back(e.egress_id());
    return out;
  };
  CHECK(ids_of({{"team", "a"}}) == std::vector<std::string>{ids[0], ids[1]});
  CHECK(ids_of({{"team", "a"}, {"tier", "gold"}}) == std::vector<std::string>{ids[0]});
  CHECK(ids_of({{"tier", "gold"}}) == std::vector<std::string>{ids[0], ids[2]});
  CHECK(ids_of({}) == ids);
  CHECK(ids_of({{"team", "c"}}).empty());
}

TEST_CASE("ListEgresses: selector keys and values must satisfy the label rules") {
  Harness h;
  ctrl::ListEgressesRequest r;
  (*r.mutable_label_selector())["bad key!"] = "a";
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
  r.clear_label_selector();
  (*r.mutable_label_selector())["team"] = "bad value!";
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
}

TEST_CASE("ListEgresses: a label_selector of more than 64 entries is invalid_argument") {
  Harness h;
  must_create(h, socks5("203.0.113.5:1080"));
  ctrl::ListEgressesRequest r;
  // 'k' + and std::string(1, 'v'): the GCC -Wrestrict note above.
  for (int i = 0; i < 65; ++i) (*r.mutable_label_selector())['k' + std::to_string(i)] = std::string(1, 'v');
  CHECK(code_of(h.list(r)) == Code::invalid_argument);
  r.mutable_label_selector()->erase("k64");
  auto l = h.list(r);
  REQUIRE_MESSAGE(l.ok(), (l.ok() ? "" : l.error().message));
  CHECK(l->egresses_size() == 0);
}

TEST_CASE("ListEgresses: paging while Egresses are created and deleted never repeats or skips an item") {
  Harness h;
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(must_create(h, socks5("203.0.113.5:1080")).egress_id());
  // Items that exist throughout: every third one survives; the others may be deleted.
  std::set<std::string> survivors;
  for (size_t i = 0; i < ids.size(); i += 3) survivors.insert(ids[i]);
  std::vector<std::string> seen;
  ctrl::ListEgressesRequest r;
  r.set_page_size(4);
  size_t victim = 1;
  for (int page = 0; page < 100; ++page) {
    auto l = h.list(r);
    REQUIRE(l.ok());
    for (const auto& e : l->egresses()) seen.push_back(e.egress_id());
    // Between pages: delete a not-yet-seen or already-seen non-survivor, create a new one.
    while (victim < ids.size() && survivors.count(ids[victim])) ++victim;
    if (victim < ids.size()) REQUIRE(h.delete_egress(ids[victim++]).ok());
    must_create(h, socks5("203.0.113.5:1080"));
    if (l->next_page_token().empty()) break;
    r.set_page_token(l->next_page_token());
  }
  std::set<std::string> unique(seen.begin(), seen.end());
  CHECK(unique.size() == seen.size());
  for (const auto& s : survivors) CHECK(unique.count(s) == 1);
}

TEST_CASE("UpdateEgressLabels: replaces the whole map under CAS and never touches the revision") {
  Harness h;
  ctrl::CreateEgressRequest c;
  c.set_command_id("c");
  *c.mutable_spec() = socks5("203.0.113.5:1080");
  (*c.mutable_labels())["a"] = "1";
  (*c.mutable_labels())["b"] = "2";
  auto e = h.create(c)->egress();
  CHECK(e.labels_revision() == 1);
  ctrl::UpdateEgressLabelsRequest r;
  r.set_command_id("l1");
  r.set_egress_id(e.egress_id());
  r.set_expected_labels_revision(1);
  (*r.mutable_labels())["c"] = "3";
  auto u = h.labels(r);
  REQUIRE(u.ok());
  CHECK(u->egress().labels_size() == 1);
  CHECK(u->egress().labels().at("c") == "3");
  CHECK(u->egress().labels_revision() == 2);
  CHECK(u->egress().revision() == 1);
  CHECK(u->egress().annotations_revision() == 1);
}

TEST_CASE("UpdateEgressLabels: a mismatched expected_labels_revision is aborted and changes nothing") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  ctrl::UpdateEgressLabelsRequest r;
  r.set_command_id("l1");
  r.set_egress_id(e.egress_id());
  r.set_expected_labels_revision(2);
  (*r.mutable_labels())["c"] = "3";
  CHECK(code_of(h.labels(r)) == Code::aborted);
  CHECK(h.get_egress(e.egress_id())->egress().labels_size() == 0);
}

TEST_CASE("UpdateEgressLabels: equal content is idempotent and keeps labels_revision") {
  Harness h;
  ctrl::CreateEgressRequest c;
  c.set_command_id("c");
  *c.mutable_spec() = socks5("203.0.113.5:1080");
  (*c.mutable_labels())["a"] = "1";
  auto e = h.create(c)->egress();
  ctrl::UpdateEgressLabelsRequest r;
  r.set_command_id("l1");
  r.set_egress_id(e.egress_id());
  r.set_expected_labels_revision(1);
  (*r.mutable_labels())["a"] = "1";
  auto u = h.labels(r);
  REQUIRE(u.ok());
  CHECK(u->egress().labels_revision() == 1);
}

TEST_CASE("UpdateEgressLabels: label syntax and the 64-label limit are enforced") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  ctrl::UpdateEgressLabelsRequest r;
  r.set_egress_id(e.egress_id());
  r.set_expected_labels_revision(1);
  // 'k' and std::string(1, 'v'), not "k" + ... and = "v": both trip GCC 12's -Wrestrict
  // false positive at -O3 (GCC PR 105329, 105651).
  for (int i = 0; i < 65; ++i) (*r.mutable_labels())['k' + std::to_string(i)] = std::string(1, 'v');
  r.set_command_id("too-many");
  CHECK(code_of(h.labels(r)) == Code::invalid_argument);
  r.clear_labels();
  for (int i = 0; i < 64; ++i) (*r.mutable_labels())['k' + std::to_string(i)] = std::string(1, 'v');
  r.set_command_id("just-enough");
  CHECK(h.labels(r).ok());
  r.clear_labels();
  (*r.mutable_labels())["-bad"] = "v";
  r.set_expected_labels_revision(2);
  r.set_command_id("bad-key");
  CHECK(code_of(h.labels(r)) == Code::invalid_argument);
  ctrl::CreateEgressRequest c;
  c.set_command_id("bad-create");
  *c.mutable_spec() = socks5("203.0.113.5:1080");
  (*c.mutable_labels())["ok"] = "bad value";
  CHECK(code_of(h.create(c)) == Code::invalid_argument);
}

TEST_CASE("UpdateEgressAnnotations: whole-map CAS, equal content keeps the revision, 256 KiB limit") {
  Harness h;
  auto e = must_create(h, socks5("203.0.113.5:1080"));
  ctrl::UpdateEgressAnnotationsRequest r;
  r.set_command_id("a1");
  r.set_egress_id(e.egress_id());
  r.set_expected_annotations_revision(1);
  (*r.mutable_annotations())["example.com/note"] = "any UTF-8 text: \xc3\xa9 and spaces";
  auto u = h.annotations(r);
  REQUIRE(u.ok());
  CHECK(u->egress().annotations_revision() == 2);
  CHECK(u->egress().revision() == 1);
  CHECK(u->egress().labels_revision() == 1);
  r.set_command_id("a2");
  r.set_expected_annotations_revision(2);
  CHECK(h.annotations(r)->egress().annotations_revision() == 2);  // equal content
  r.set_command_id("a3");
  r.set_expected_annotations_revision(1);
  CHECK(code_of(h.annotations(r)) == Code::aborted);
  r.clear_annotations();
  r.set_expected_annotations_revision(2);
  (*r.mutable_annotations())["big"] = std::string(256 * 1024 - 3, 'x');
  r.set_command_id("a4");
  CHECK(h.annotations(r).ok());  // 3 + (256 KiB - 3) bytes: exactly the limit
  r.clear_annotations();
  r.set_expected_annotations_revision(3);
  (*r.mutable_annotations())["big"] = std::string(256 * 1024 - 2, 'x');
  r.set_command_id("a5");
  CHECK(code_of(h.annotations(r)) == Code::invalid_argument);
  r.clear_annotations();
  (*r.mutable_annotations())["bad key!"] = "x";
  r.set_command_id("a6");
  CHECK(code_of(h.annotations(r)) == Code::invalid_argument);
}

TEST_CASE("CreateEgress: past egress.max_egresses is resource_exhausted and stores nothing; a delete makes room") {
  Harness h;
  h.config.egress.max_egresses = 2;
  h.reopen();
  auto a = must_create(h, socks5("203.0.113.5:1080"));
  must_create(h, socks5("203.0.113.6:1080"));
  auto over = h.create_egress(socks5("203.0.113.7:1080"));
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == Code::resource_exhausted);
  CHECK(over.error().message.find("egress.max_egresses") != std::string::npos);
  auto listed = h.list(ctrl::ListEgressesRequest());
  REQUIRE(listed.ok());
  CHECK(listed->egresses_size() == 2);
  REQUIRE(h.delete_egress(a.egress_id()).ok());
  must_create(h, socks5("203.0.113.7:1080"));
}
