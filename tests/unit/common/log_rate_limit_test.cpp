#include "agent/common/log_rate_limit.h"

#include <doctest/doctest.h>

using kib::LogRateLimit;
using namespace std::chrono_literals;

TEST_CASE("a log budget lets its burst through per window and counts the rest") {
  LogRateLimit limit(3, 60s);
  const auto t0 = LogRateLimit::Clock::time_point{} + 1h;
  for (int i = 0; i < 3; ++i) CHECK(limit.admit(t0 + std::chrono::seconds(i)).log);
  for (int i = 0; i < 5; ++i) CHECK(!limit.admit(t0 + 10s).log);
  // Still inside the window that began at t0.
  CHECK(!limit.admit(t0 + 59s).log);
  // A new window: the first line through reports the six dropped.
  auto v = limit.admit(t0 + 60s);
  CHECK(v.log);
  CHECK(v.suppressed_before == 6);
  CHECK(limit.admit(t0 + 61s).suppressed_before == 0);
}
