// Model-based test: a long seeded random sequence of valid and invalid Egress writes,
// applied to the service and to a small model of the reference's rules; every
// response must match what the model predicts.
#include <google/protobuf/util/message_differencer.h>

#include <optional>
#include <random>

#include "agent/api/conventions/proto_bytes.h"
#include "agent/api/services/metadata_update.h"
#include "agent/api/services/stored_resources.h"
#include "tests/unit/services/service_harness.h"

using namespace kib;
using namespace kib::test;
using google::protobuf::util::MessageDifferencer;

namespace {

struct ModelEgress {
  ctrl::Egress e;  // as the service should return it (no password)
  std::string password;
};

struct Outcome {
  Code code = Code::ok;
  std::string response;  // serialized response when ok
};

class Model {
 public:
  std::vector<std::string> order;  // creation order of live ids
  std::map<std::string, ModelEgress> live;
  std::vector<std::string> dead;

  static bool address_valid(const std::string& a) {
    return a.rfind("203.0.113.", 0) == 0 || a == "proxy.example:1080" || a == "nxdomain.example:1080";
  }
  static Code spec_code(const ctrl::EgressSpec& s) {
    if (!s.has_socks5()) return Code::invalid_argument;
    if (s.socks5().username().empty() != s.socks5().password().empty()) return Code::invalid_argument;
    if (!address_valid(s.socks5().address())) return Code::invalid_argument;
    return Code::ok;
  }
  static ctrl::EgressSpec public_spec(ctrl::EgressSpec s) {
    s.mutable_socks5()->clear_password();
    return s;
  }
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(int percent) { return pick(100) < percent; }

  ctrl::EgressSpec spec() {
    static const char* addrs[] = {
        "203.0.113.1:1080",   "203.0.113.2:1080", "proxy.example:1080", "nxdomain.example:1080", "10.0.0.1:1080",
        "mixed.example:1080", "no-port"};
    ctrl::EgressSpec s;
    if (chance(5)) return s;  // no protocol branch
    s.mutable_socks5()->set_address(addrs[pick(chance(85) ? 4 : 7)]);
    int creds = pick(10);
    if (creds < 3) {
      s.mutable_socks5()->set_username("user" + std::to_string(pick(2)));
      s.mutable_socks5()->set_password("pw" + std::to_string(pick(2)));
    } else if (creds == 3) {
      s.mutable_socks5()->set_username("lonely");
    }
    s.set_udp_enabled(chance(30));
    return s;
  }
  void labels(google::protobuf::Map<std::string, std::string>& m) {
    int n = pick(3);
    for (int i = 0; i < n; ++i) m["k" + std::to_string(pick(3))] = "v" + std::to_string(pick(2));
    if (chance(8)) m["bad key"] = "v";
  }

 private:
  std::mt19937 rng_;
};

bool labels_valid(const google::protobuf::Map<std::string, std::string>& m) { return !m.contains("bad key"); }

template <typename Resp>
Outcome outcome_of(const Result<Resp>& r) {
  if (!r.ok()) return {r.error().code, ""};
  return {Code::ok, api::deterministic_bytes(*r)};  // maps in key order
}

}  // namespace

TEST_CASE("Model: a seeded random sequence of Egress writes matches the model, response by response") {
  Harness h;
  Model m;
  const uint32_t seed = 20261202;
  Generator g(seed);
  CAPTURE(seed);
  std::vector<std::pair<std::function<Outcome()>, Outcome>> history;  // retries of earlier commands

  auto check_egress = [&](const ctrl::Egress& got) {
    auto it = m.live.find(got.egress_id());
    REQUIRE(it != m.live.end());
    CHECK_MESSAGE(MessageDifferencer::Equals(got, it->second.e),
                  "got " << got.ShortDebugString() << "\nwant " << it->second.e.ShortDebugString());
  };
  auto random_id = [&]() -> std::string {
    int k = g.pick(10);
    if (k < 7 && !m.order.empty()) return m.order[static_cast<size_t>(g.pick(static_cast<int>(m.order.size())))];
    if (k < 9 && !m.dead.empty()) return m.dead[static_cast<size_t>(g.pick(static_cast<int>(m.dead.size())))];
    return "eg-unknown";
  };

  for (int step = 0; step < 1500; ++step) {
    CAPTURE(step);
    h.advance(std::chrono::seconds(1));
    auto now = h.now;
    int op = g.pick(100);
    if (op < 8 && !history.empty()) {
      // Retry an earlier command: the first outcome again, nothing else changes.
      auto& [again, first] = history[static_cast<size_t>(g.pick(static_cast<int>(history.size())))];
      Outcome o = again();
      CHECK(o.code == first.code);
      CHECK(o.response == first.response);
    } else if (op < 30) {
      ctrl::CreateEgressRequest r;
      r.set_command_id(h.next_command_id());
      *r.mutable_spec() = g.spec();
      g.labels(*r.mutable_labels());
      auto got = h.create(r);
      Code want = labels_valid(r.labels()) ? Model::spec_code(r.spec()) : Code::invalid_argument;
      REQUIRE(code_of(got) == want);
      if (got.ok()) {
        ModelEgress me;
        me.e.set_egress_id(got->egress().egress_id());
        *me.e.mutable_spec() = Model::public_spec(r.spec());
        me.e.set_revision(1);
        *me.e.mutable_created_at() = api::to_timestamp(now);
        *me.e.mutable_updated_at() = api::to_timestamp(now);
        *me.e.mutable_labels() = r.labels();
        me.e.set_labels_revision(1);
        me.e.set_annotations_revision(1);
        me.password = r.spec().socks5().password();
        m.order.push_back(me.e.egress_id());
        m.live[me.e.egress_id()] = me;
        check_egress(got->egress());
      }
      history.emplace_back([&h, r] { return outcome_of(h.create(r)); }, outcome_of(got));
    } else if (op < 60) {
      ctrl::UpdateEgressRequest r;
      r.set_command_id(h.next_command_id());
      r.set_egress_id(random_id());
      *r.mutable_spec() = g.spec();
      auto it = m.live.find(r.egress_id());
      uint64_t cur = it == m.live.end() ? 1 : it->second.e.revision();
      int rv = g.pick(10);
      r.set_expected_revision(rv < 7 ? cur : rv < 9 ? cur + 1 : 0);
      if (g.chance(20)) r.set_drain_seconds(g.chance(80) ? 10 : 4000);
      if (it != m.live.end() && g.chance(25)) {  // resend the current content
        *r.mutable_spec() = it->second.e.spec();
        r.mutable_spec()->mutable_socks5()->set_password(it->second.password);
      }
      auto got = h.update(r);
      Code want = Code::ok;
      if (r.expected_revision() == 0 || (r.has_drain_seconds() && r.drain_seconds() > 3600))
        want = Code::invalid_argument;
      else if (Model::spec_code(r.spec()) != Code::ok)
        want = Code::invalid_argument;
      else if (it == m.live.end())
        want = Code::not_found;
      else if (r.expected_revision() != cur)
        want = Code::aborted;
      REQUIRE(code_of(got) == want);
      if (got.ok()) {
        auto& me = it->second;
        bool same = Model::public_spec(r.spec()).SerializeAsString() == me.e.spec().SerializeAsString() &&
                    r.spec().socks5().password() == me.password;
        if (!same) {
          *me.e.mutable_spec() = Model::public_spec(r.spec());
          me.password = r.spec().socks5().password();
          me.e.set_revision(me.e.revision() + 1);
          *me.e.mutable_updated_at() = api::to_timestamp(now);
        }
        check_egress(got->egress());
      }
      history.emplace_back([&h, r] { return outcome_of(h.update(r)); }, outcome_of(got));
    } else if (op < 72) {
      ctrl::DeleteEgressRequest r;
      r.set_command_id(h.next_command_id());
      r.set_egress_id(random_id());
      auto got = h.call<ctrl::DeleteEgressResponse>("kibotos.ctrl.v1.EgressService/DeleteEgress", r);
      bool exists = m.live.count(r.egress_id()) > 0;
      REQUIRE(code_of(got) == (exists ? Code::ok : Code::not_found));
      if (exists) {
        m.live.erase(r.egress_id());
        m.order.erase(std::find(m.order.begin(), m.order.end(), r.egress_id()));
        m.dead.push_back(r.egress_id());
      }
      history.emplace_back(
          [&h, r] {
        return outcome_of(h.call<ctrl::DeleteEgressResponse>("kibotos.ctrl.v1.EgressService/DeleteEgress", r));
          },
          outcome_of(got));
    } else if (op < 85) {
      ctrl::UpdateEgressLabelsRequest r;
      r.set_command_id(h.next_command_id());
      r.set_egress_id(random_id());
      g.labels(*r.mutable_labels());
      auto it = m.live.find(r.egress_id());
      uint64_t cur = it == m.live.end() ? 1 : it->second.e.labels_revision();
      r.set_expected_labels_revision(g.chance(80) ? cur : cur + 1);
      auto got = h.labels(r);
      Code want = !labels_valid(r.labels())             ? Code::invalid_argument
                  : it == m.live.end()                  ? Code::not_found
                  : r.expected_labels_revision() != cur ? Code::aborted
                                                        : Code::ok;
      REQUIRE(code_of(got) == want);
      if (got.ok()) {
        auto& me = it->second;
        if (!api::same_map(me.e.labels(), r.labels())) {
          *me.e.mutable_labels() = r.labels();
          me.e.set_labels_revision(me.e.labels_revision() + 1);
        }
        check_egress(got->egress());
      }
      history.emplace_back([&h, r] { return outcome_of(h.labels(r)); }, outcome_of(got));
    } else {
      // Reads: Get of a random id, and the whole list in creation order.
      std::string id = random_id();
      auto got = h.get_egress(id);
      REQUIRE(code_of(got) == (m.live.count(id) ? Code::ok : Code::not_found));
      if (got.ok()) check_egress(got->egress());
      ctrl::ListEgressesRequest lr;
      lr.set_page_size(1000);
      auto l = h.list(lr);
      REQUIRE(l.ok());
      REQUIRE(static_cast<size_t>(l->egresses_size()) == m.order.size());
      for (int i = 0; i < l->egresses_size(); ++i) {
        CHECK(l->egresses(i).egress_id() == m.order[static_cast<size_t>(i)]);
        check_egress(l->egresses(i));
      }
    }
    // What the data plane would dial with: the runtime's copy has the password.
    if (auto rev = h.runtime.last_published();
        rev && m.live.count(rev->egress_id) && m.live[rev->egress_id].e.revision() == rev->revision)
      CHECK(rev->spec.socks5().password() == m.live[rev->egress_id].password);
  }
}
