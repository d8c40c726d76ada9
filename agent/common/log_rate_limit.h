#pragma once
// A budget for log lines a client can cause: `burst` lines per `window`, and a count of
// those dropped, to be reported with the next line let through.
#include <chrono>
#include <cstdint>
#include <mutex>

namespace kib {

class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  LogRateLimit(int burst, Clock::duration window) : burst_(burst), window_(window) {}

  struct Verdict {
    bool log = false;
    uint64_t suppressed_before = 0;  // lines dropped since the last one let through
  };
  // Thread-safe: log handlers are called from any thread.
  Verdict admit(Clock::time_point now);

 private:
  std::mutex mu_;
  const int burst_;
  const Clock::duration window_;
  Clock::time_point window_start_{};
  int in_window_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace kib
