#pragma once
// libprotobuf writes its own lines to stderr ("[libprotobuf ERROR …]"), one per string
// field that is not UTF-8 in a binary request: those go through our logger instead, so
// log.level and log.format hold, at most a few a minute.
#include <chrono>
#include <cstdint>
#include <mutex>

namespace kib::daemon {

// Lets `burst` lines through per `window`; counts the rest.
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  LogRateLimit(int burst, Clock::duration window) : burst_(burst), window_(window) {}

  struct Verdict {
    bool log = false;
    uint64_t suppressed_before = 0;  // lines dropped in the windows since the last one logged
  };
  Verdict admit(Clock::time_point now);

 private:
  std::mutex mu_;
  const int burst_;
  const Clock::duration window_;
  Clock::time_point window_start_{};
  int in_window_ = 0;
  uint64_t suppressed_ = 0;
};

// Installs the handler (before any thread uses protobuf: SetLogHandler is not
// thread-safe).
void route_protobuf_logs();

}  // namespace kib::daemon
