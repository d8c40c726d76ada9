// ApplyOrder: which committed callbacks may run at once (apply_order.h).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "agent/api/services/apply_order.h"

using kib::api::ApplyOrder;
using namespace std::chrono_literals;

namespace {

// Waits for `t` on a thread; the future is ready once the wait returned.
std::future<void> waiting(ApplyOrder::Ticket& t) {
  return std::async(std::launch::async, [&t] { t.wait(); });
}

bool returns_soon(std::future<void>& f) { return f.wait_for(5s) == std::future_status::ready; }
// A wait that must not return: still blocked after 100 ms (a correct order never
// lets it go, so this cannot fail by timing).
bool still_blocked(std::future<void>& f) { return f.wait_for(100ms) == std::future_status::timeout; }

}  // namespace

TEST_CASE("ApplyOrder: different keys run at once, in any order") {
  ApplyOrder order;
  auto a = order.take("ws-a");
  auto b = order.take("ws-b");
  auto fb = waiting(b);
  CHECK(returns_soon(fb));  // a is still pending
  auto fa = waiting(a);
  CHECK(returns_soon(fa));
}

TEST_CASE("ApplyOrder: the same key runs in ticket order") {
  ApplyOrder order;
  auto first = order.take("ws-a");
  auto second = order.take("ws-a");
  auto other = order.take("ws-b");
  auto f2 = waiting(second);
  CHECK(still_blocked(f2));
  auto fo = waiting(other);
  CHECK(returns_soon(fo));
  first.finish();
  CHECK(returns_soon(f2));
}

TEST_CASE("ApplyOrder: a barrier waits for every earlier ticket and holds every later one") {
  ApplyOrder order;
  auto a = order.take("ws-a");
  auto b = order.take("ws-b");
  auto barrier = order.take({});
  auto later = order.take("ws-c");
  auto fbar = waiting(barrier);
  auto flater = waiting(later);
  CHECK(still_blocked(fbar));
  a.finish();
  CHECK(still_blocked(fbar));
  b.finish();
  CHECK(returns_soon(fbar));
  CHECK(still_blocked(flater));
  barrier.finish();
  CHECK(returns_soon(flater));
}

TEST_CASE("ApplyOrder: a ticket finishes when it is destroyed, also unused") {
  ApplyOrder order;
  {
    auto dropped = order.take("ws-a");  // e.g. the write failed before its callback
    CHECK(order.pending() == 1);
  }
  CHECK(order.pending() == 0);
  auto next = order.take({});
  auto f = waiting(next);
  CHECK(returns_soon(f));
}
