#pragma once
// The access log (config log.access): one JSON line per relayed guest connection when
// it ends. The loops hand lines over without blocking; a writer thread appends them
// to the file (or to stderr: "journal", which journald keeps under systemd). Lines
// beyond log.access.max_lines_per_second, or while the writer is behind, are dropped
// and counted; the next line written after a drop is a {"dropped":N} record.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/relay/relay_accounting.h"

namespace kib::dataplane {

// What one line says (never the Egress's credentials: the record holds none).
struct AccessRecord {
  std::chrono::system_clock::time_point closed_at;
  std::string_view workspace_id;
  std::string_view egress_id;
  uint64_t egress_revision = 0;
  std::string guest;        // the guest's ip:port
  std::string destination;  // the original destination ip:port
  uint64_t duration_ms = 0;
  uint64_t bytes_from_guest = 0;
  uint64_t bytes_to_guest = 0;
  relay::CloseReason reason = relay::CloseReason::agent_closed;
  std::string_view dial_cause;  // empty unless the dial failed
  std::string_view error;       // the dial's failure, if any
};

// {"time":...,"workspace_id":...}\n
std::string access_log_line(const AccessRecord& r);

class AccessLog {
 public:
  // path: an absolute file path (appended to, created 0640) or "journal" (stderr).
  static Result<std::unique_ptr<AccessLog>> open(const std::string& path, uint32_t max_lines_per_second);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Thread-safe and non-blocking (a short lock): queues the line or drops it.
  void write(std::string line);
  uint64_t written() const { return written_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  AccessLog(UniqueFd fd, int out, uint32_t per_second);
  void run();
  bool admit();  // under mu_

  UniqueFd fd_;  // the file (unset for stderr)
  int out_;
  const uint32_t per_second_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point window_{};
  uint32_t in_window_ = 0;
  uint64_t dropped_unreported_ = 0;
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace kib::dataplane
