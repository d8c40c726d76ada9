// Concurrency: CAS updates from several clients.
#include <algorithm>
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
