// Concurrency: CAS updates from several clients.
#include <algorithm>
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
