// Command IDs (API.md "Conventions for every resource and write").
#include <future>
#include <thread>

#include "tests/unit/services/service_harness.h"

using namespace kib;
using namespace kib::test;

namespace {

ctrl::CreateEgressRequest create_req(const std::string& id, const std::string& address = "203.0.113.5:1080") {
  ctrl::CreateEgressRequest r;
  r.set_command_id(id);
  *r.mutable_spec() = socks5(address);
  return r;
}

size_t egress_count(Harness& h) {
  auto l = h.list(ctrl::ListEgressesRequest());
  REQUIRE(l.ok());
  return static_cast<size_t>(l->egresses_size());
}

}  // namespace

TEST_CASE("Command IDs: required on every write, 1 to 128 printable ASCII bytes") {
  Harness h;
  CHECK(code_of(h.create(create_req(""))) == Code::invalid_argument);
  CHECK(code_of(h.create(create_req(std::string(129, 'c')))) == Code::invalid_argument);
  CHECK(code_of(h.create(create_req("tab\there"))) == Code::invalid_argument);
  CHECK(code_of(h.create(create_req("caf\xc3\xa9"))) == Code::invalid_argument);
  CHECK(h.create(create_req(std::string(128, 'c'))).ok());
  CHECK(h.create(create_req("x")).ok());
  CHECK(h.create(create_req("with space ~!")).ok());
  auto e = h.create(create_req("base"))->egress();
  // Each of the other writes refuses a missing command ID too.
  ctrl::UpdateEgressRequest u;
  u.set_egress_id(e.egress_id());
  u.set_expected_revision(1);
  *u.mutable_spec() = socks5("203.0.113.6:1080");
  CHECK(code_of(h.update(u)) == Code::invalid_argument);
  ctrl::DeleteEgressRequest d;
  d.set_egress_id(e.egress_id());
  CHECK(code_of(h.call<ctrl::DeleteEgressResponse>("kibotos.ctrl.v1.EgressService/DeleteEgress", d)) ==
        Code::invalid_argument);
  ctrl::UpdateEgressLabelsRequest l;
  l.set_egress_id(e.egress_id());
  l.set_expected_labels_revision(1);
  CHECK(code_of(h.labels(l)) == Code::invalid_argument);
  ctrl::UpdateEgressAnnotationsRequest a;
  a.set_egress_id(e.egress_id());
  a.set_expected_annotations_revision(1);
  CHECK(code_of(h.annotations(a)) == Code::invalid_argument);
  CHECK(h.get_egress(e.egress_id())->egress().revision() == 1);
}

TEST_CASE("Command IDs: the same ID with the same request returns the first outcome without acting again") {
  Harness h;
  auto first = h.create(create_req("once"));
  REQUIRE(first.ok());
  h.runtime.clear();
  h.advance(std::chrono::seconds(5));
  auto again = h.create(create_req("once"));
  REQUIRE(again.ok());
  CHECK(again->SerializeAsString() == first->SerializeAsString());
  CHECK(egress_count(h) == 1);
  CHECK(h.runtime.events().empty());
}

TEST_CASE("Command IDs: a retry returns the first outcome even when it was an error") {
  Harness h;
  auto e = h.create(create_req("c1"))->egress();
  ctrl::UpdateEgressRequest u;
  u.set_command_id("u-stale");
  u.set_egress_id(e.egress_id());
  u.set_expected_revision(7);
  *u.mutable_spec() = socks5("203.0.113.6:1080");
  auto first = h.update(u);
  CHECK(code_of(first) == Code::aborted);
  // Even once the revision would match, the retry answers what the first call did.
  for (int rev = 2; rev <= 7; ++rev)
    REQUIRE(h.update_egress(e.egress_id(), rev - 1, socks5("203.0.113." + std::to_string(rev) + ":1080")).ok());
  auto again = h.update(u);
  CHECK(code_of(again) == Code::aborted);
  CHECK(again.error().message == first.error().message);
}

TEST_CASE("Command IDs: the same ID with a different request is invalid_argument and changes nothing") {
  Harness h;
  REQUIRE(h.create(create_req("dup", "203.0.113.5:1080")).ok());
  h.runtime.clear();
  CHECK(code_of(h.create(create_req("dup", "203.0.113.6:1080"))) == Code::invalid_argument);
  CHECK(egress_count(h) == 1);
  CHECK(h.runtime.events().empty());
  // Another method with the same ID is a different request too.
  ctrl::DeleteEgressRequest d;
  d.set_command_id("dup");
  d.set_egress_id("eg-x");
  CHECK(code_of(h.call<ctrl::DeleteEgressResponse>("kibotos.ctrl.v1.EgressService/DeleteEgress", d)) ==
        Code::invalid_argument);
}

TEST_CASE("Command IDs: map order does not make an equal request different") {
  Harness h;
  ctrl::CreateEgressRequest a = create_req("maps");
  for (int i = 0; i < 20; ++i) (*a.mutable_labels())["k" + std::to_string(i)] = "v";
  ctrl::CreateEgressRequest b = create_req("maps");
  for (int i = 19; i >= 0; --i) (*b.mutable_labels())["k" + std::to_string(i)] = "v";
  auto first = h.create(a);
  REQUIRE(first.ok());
  auto again = h.create(b);
  REQUIRE(again.ok());
  CHECK(again->egress().egress_id() == first->egress().egress_id());
}

TEST_CASE("Command IDs: a retry after an agent restart with a now-stale expected_revision returns the same success") {
  Harness h;
  auto e = h.create(create_req("c1"))->egress();
  ctrl::UpdateEgressRequest u;
  u.set_command_id("update-1");
  u.set_egress_id(e.egress_id());
  u.set_expected_revision(1);
  *u.mutable_spec() = socks5("203.0.113.6:1080");
  u.set_drain_seconds(30);
  auto first = h.update(u);
  REQUIRE(first.ok());
  CHECK(first->egress().revision() == 2);
  h.reopen();
  h.runtime.clear();
  auto again = h.update(u);  // expected_revision 1 is stale now
  REQUIRE(again.ok());
  CHECK(again->SerializeAsString() == first->SerializeAsString());
  CHECK(h.get_egress(e.egress_id())->egress().revision() == 2);
  CHECK(h.runtime.events().empty());
}

TEST_CASE("Command IDs: the same ID while its first request is still running is aborted") {
  Harness h;
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  h.resolver.hook = [&](const std::string& host) {
    if (host != "slow.example") return;
    entered.set_value();
    released.wait();
  };
  auto first = std::async(std::launch::async, [&] { return h.create(create_req("busy", "slow.example:1080")); });
  entered.get_future().wait();
  CHECK(code_of(h.create(create_req("busy", "slow.example:1080"))) == Code::aborted);
  release.set_value();
  REQUIRE(first.get().ok());
  // Once finished, the same ID replays the first outcome.
  h.resolver.hook = nullptr;
  CHECK(h.create(create_req("busy", "slow.example:1080")).ok());
  CHECK(egress_count(h) == 1);
}

TEST_CASE("Command IDs: the command log forgets IDs after commands.retention") {
  Harness h;
  h.config.commands_retention = std::chrono::seconds(3600);
  h.reopen();
  REQUIRE(h.create(create_req("old")).ok());
  h.advance(std::chrono::seconds(3599));
  CHECK(code_of(h.create(create_req("old", "203.0.113.9:1080"))) == Code::invalid_argument);  // remembered
  h.advance(std::chrono::seconds(2));
  // Forgotten: the same ID now runs as a new command, and the old record is pruned.
  CHECK(h.create(create_req("old", "203.0.113.9:1080")).ok());
  CHECK(egress_count(h) == 2);
}

TEST_CASE("Command IDs: a step of the system clock neither forgets an ID early nor keeps one for ever") {
  Harness h;
  h.step_proof_commands = true;
  h.config.commands_retention = std::chrono::seconds(3600);
  h.reopen();
  REQUIRE(h.create(create_req("stepped")).ok());
  // The clock is stepped two days ahead: a second later the ID is still remembered.
  h.advance(std::chrono::hours(48));
  h.elapse(std::chrono::seconds(1));
  CHECK(code_of(h.create(create_req("stepped", "203.0.113.9:1080"))) == Code::invalid_argument);
  // Stepped back three days: the ID is forgotten all the same once the hour has passed.
  h.advance(-std::chrono::hours(72));
  h.elapse(std::chrono::seconds(3600));
  CHECK(h.create(create_req("stepped", "203.0.113.9:1080")).ok());
  CHECK(egress_count(h) == 2);
}

TEST_CASE("Command IDs: the outcome is written in the same transaction as the change") {
  Harness h;
  // A failing write (here: a deleted Egress) leaves the state as it was, and its
  // outcome is remembered all the same.
  auto e = h.create(create_req("c"))->egress();
  REQUIRE(h.delete_egress(e.egress_id()).ok());
  ctrl::UpdateEgressLabelsRequest l;
  l.set_command_id("labels");
  l.set_egress_id(e.egress_id());
  l.set_expected_labels_revision(1);
  CHECK(code_of(h.labels(l)) == Code::not_found);
  h.reopen();
  CHECK(code_of(h.labels(l)) == Code::not_found);
  l.set_expected_labels_revision(2);
  CHECK(code_of(h.labels(l)) == Code::invalid_argument);
}
