// Concurrency: CAS updates from several clients.
#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "tests/unit/services/service_harness.h"

using namespace kib;
using namespace kib::test;

TEST_CASE("Concurrency: 8 clients updating one Egress with CAS: exactly one wins per revision, revisions +1") {
  Harness h;
  auto e = h.create_egress(socks5("203.0.113.1:1080"));
  REQUIRE(e.ok());
  const std::string id = e->egress().egress_id();
  constexpr int kClients = 8, kRounds = 20;
  std::mutex mu;
  std::map<uint64_t, std::vector<int>> winners;  // new revision -> clients that got it
  std::atomic<int> failures_other_than_aborted{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < kRounds; ++i) {
        auto g = h.get_egress(id);
        if (!g.ok()) {
          ++failures_other_than_aborted;
          continue;
        }
        uint64_t seen = g->egress().revision();
        ctrl::UpdateEgressRequest r;
        r.set_command_id("c" + std::to_string(c) + "-" + std::to_string(i));
        r.set_egress_id(id);
        r.set_expected_revision(seen);
        // Distinct content per client and round: every successful update changes it.
        *r.mutable_spec() = socks5("203.0.113." + std::to_string(c + 10) + ":" + std::to_string(1000 + i));
        auto u = h.update(r);
        if (u.ok()) {
          CHECK(u->egress().revision() == seen + 1);
          std::lock_guard<std::mutex> lk(mu);
          winners[u->egress().revision()].push_back(c);
        } else if (u.error().code != Code::aborted) {
          ++failures_other_than_aborted;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures_other_than_aborted == 0);
  auto final_rev = h.get_egress(id)->egress().revision();
  // Every revision from 2 to the final one was won by exactly one client.
  CHECK(winners.size() == final_rev - 1);
  for (uint64_t rev = 2; rev <= final_rev; ++rev) {
    CAPTURE(rev);
    REQUIRE(winners.count(rev) == 1);
    CHECK(winners[rev].size() == 1);
  }
  CHECK(final_rev > 1);
}

TEST_CASE("ListEgresses: paging while another client creates and deletes never repeats or skips an item") {
  Harness h;
  std::vector<std::string> survivors, doomed;
  for (int i = 0; i < 40; ++i) {
    auto e = h.create_egress(socks5("203.0.113.1:1080"));
    REQUIRE(e.ok());
    (i % 2 ? doomed : survivors).push_back(e->egress().egress_id());
  }
  std::atomic<bool> done{false};
  std::thread churn([&] {
    size_t next = 0;
    for (int i = 0; i < 200 && !done; ++i) {
      (void)h.create_egress(socks5("203.0.113.2:1080"));
      if (next < doomed.size()) (void)h.delete_egress(doomed[next++]);
    }
  });
  std::vector<std::string> seen;
  ctrl::ListEgressesRequest r;
  r.set_page_size(3);
  for (int page = 0; page < 1000; ++page) {
    auto l = h.list(r);
    REQUIRE(l.ok());
    for (const auto& e : l->egresses()) seen.push_back(e.egress_id());
    if (l->next_page_token().empty()) break;
    r.set_page_token(l->next_page_token());
  }
  done = true;
  churn.join();
  std::set<std::string> unique(seen.begin(), seen.end());
  CHECK(unique.size() == seen.size());
  for (const auto& s : survivors) CHECK(unique.count(s) == 1);
}

namespace {

// Holds the runtime call whose line starts with `held` until a call starting with
// `other` came, or 300 ms passed (the agent must keep that one waiting for the first).
struct HeldPublish {
  std::mutex mu;
  std::condition_variable cv;
  bool other_seen = false;

  std::function<void(const std::string&)> hook(std::string held, std::string other) {
    return [this, held, other](const std::string& line) {
      std::unique_lock<std::mutex> lk(mu);
      if (line.rfind(other, 0) == 0) {
        other_seen = true;
        cv.notify_all();
      } else if (line.rfind(held, 0) == 0) {
        cv.wait_for(lk, std::chrono::milliseconds(300), [this] { return other_seen; });
      }
    };
  }
};

// Calls f until it no longer answers aborted (the revision it expects is not stored
// yet), for at most ~1 s.
template <typename F>
auto until_not_aborted(F f) {
  auto r = f();
  for (int i = 0; i < 200 && !r.ok() && r.error().code == Code::aborted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = f();
  }
  return r;
}

}  // namespace

TEST_CASE("Concurrency: two UpdateEgress on two connections reach the runtime in the order they were stored") {
  Harness h;
  auto e = h.create_egress(socks5("203.0.113.1:1080"));
  REQUIRE(e.ok());
  const std::string id = e->egress().egress_id();
  HeldPublish held;
  h.runtime.before_record = held.hook("egress_published " + id + " r2", "egress_published " + id + " r3");
  std::thread first([&] { CHECK(h.update_egress(id, 1, socks5("203.0.113.2:1080")).ok()); });
  // The second update is stored only after the first (it expects revision 2).
  auto second = until_not_aborted([&] { return h.update_egress(id, 2, socks5("203.0.113.3:1080")); });
  first.join();
  REQUIRE(second.ok());
  h.runtime.before_record = nullptr;
  // The data plane must end on revision 3, the stored one, not on the late revision 2.
  REQUIRE(h.runtime.last_published());
  CHECK(h.runtime.last_published()->revision == 3);
  auto ev = h.runtime.events();
  auto r2 = std::find_if(ev.begin(), ev.end(), [&](auto& l) { return l.find(" r2 ") != std::string::npos; });
  auto r3 = std::find_if(ev.begin(), ev.end(), [&](auto& l) { return l.find(" r3 ") != std::string::npos; });
  REQUIRE(r2 != ev.end());
  REQUIRE(r3 != ev.end());
  CHECK(r2 < r3);
}

TEST_CASE("Concurrency: two UpdateNetworkPolicy on two connections reach the runtime in the order they were stored") {
  Harness h;
  auto e = h.create_egress(socks5("203.0.113.1:1080"));
  REQUIRE(e.ok());
  auto policy = [&](const std::string& cidr) {
    ctrl::NetworkPolicy p;
    p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
    auto* r = p.add_egresses();
    r->set_egress_id(e->egress().egress_id());
    r->add_destinations(cidr);
    return p;
  };
  auto w = h.create_workspace("/proc/self/ns/net", policy("198.51.100.0/24"));
  REQUIRE(w.ok());
  const std::string id = w->workspace().workspace_id();
  HeldPublish held;
  h.runtime.before_record = held.hook("workspace_applied " + id + " /proc/self/ns/net r2",
                                      "workspace_applied " + id + " /proc/self/ns/net r3");
  std::thread first([&] { CHECK(h.update_policy(id, 1, policy("192.0.2.0/24")).ok()); });
  auto second = until_not_aborted([&] { return h.update_policy(id, 2, policy("203.0.113.0/24")); });
  first.join();
  REQUIRE(second.ok());
  h.runtime.before_record = nullptr;
  // The runtime reports what it applied last: revision 3, the stored one.
  CHECK(h.runtime.workspace_status(id).applied_revision() == 3);
}

TEST_CASE(
    "Concurrency: an Egress write stored while a Workspace's policy is being applied reaches the runtime after it") {
  Harness h;
  auto e = h.create_egress(socks5("203.0.113.1:1080"));
  REQUIRE(e.ok());
  const std::string eid = e->egress().egress_id();
  ctrl::NetworkPolicy p;
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  auto* route = p.add_egresses();
  route->set_egress_id(eid);
  route->add_destinations("198.51.100.0/24");
  auto w = h.create_workspace("/proc/self/ns/net", p);
  REQUIRE(w.ok());
  const std::string wid = w->workspace().workspace_id();
  // The policy's apply waits (at most 300 ms) for the Egress's publish, which must
  // not come before it ends: Egress writes are barriers (apply_order.h).
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, published = false;
  h.runtime.before_record = [&](const std::string& line) {
    std::unique_lock<std::mutex> lk(mu);
    if (line.rfind("workspace_applied " + wid, 0) == 0 && line.find(" r2 ") != std::string::npos) {
      entered = true;
      cv.notify_all();
      cv.wait_for(lk, std::chrono::milliseconds(300), [&] { return published; });
    } else if (line.rfind("egress_published " + eid + " r2", 0) == 0) {
      published = true;
      cv.notify_all();
    }
  };
  p.mutable_egresses(0)->set_destinations(0, "192.0.2.0/24");
  std::thread first([&] { CHECK(h.update_policy(wid, 1, p).ok()); });
  {
    std::unique_lock<std::mutex> lk(mu);
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return entered; }));
  }
  CHECK(h.update_egress(eid, 1, socks5("203.0.113.2:1080")).ok());  // stored after the policy
  first.join();
  h.runtime.before_record = nullptr;
  auto ev = h.runtime.events();
  auto applied = std::find_if(ev.begin(), ev.end(), [&](auto& l) {
    return l.rfind("workspace_applied " + wid, 0) == 0 && l.find(" r2 ") != std::string::npos;
  });
  auto egress =
      std::find_if(ev.begin(), ev.end(), [&](auto& l) { return l.rfind("egress_published " + eid + " r2", 0) == 0; });
  REQUIRE(applied != ev.end());
  REQUIRE(egress != ev.end());
  CHECK(applied < egress);
}
