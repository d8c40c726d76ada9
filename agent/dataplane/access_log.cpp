#include "agent/dataplane/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "agent/common/errno_error.h"
#include "agent/common/json_string.h"

namespace kib::dataplane {
namespace {

// Lines waiting for the writer: beyond, the loops drop rather than queue without bound.
constexpr size_t kMaxQueued = 65536;

void field(std::string& out, const char* name, std::string_view value) {
  out += ",\"";
  out += name;
  out += "\":";
  append_json_string(out, value);
}

void field(std::string& out, const char* name, uint64_t value) {
  out += ",\"";
  out += name;
  out += "\":";
  out += std::to_string(value);
}

std::string rfc3339_micros(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us % 1000000));
  return buf;
}

// Writes all of s, retrying short writes and EINTR; false when the target failed.
bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string access_log_line(const AccessRecord& r) {
  std::string out = "{\"time\":\"" + rfc3339_micros(r.closed_at) + "\"";
  field(out, "workspace_id", r.workspace_id);
  field(out, "egress_id", r.egress_id);
  field(out, "egress_revision", r.egress_revision);
  field(out, "guest", r.guest);
  field(out, "destination", r.destination);
  field(out, "duration_ms", r.duration_ms);
  field(out, "bytes_from_guest", r.bytes_from_guest);
  field(out, "bytes_to_guest", r.bytes_to_guest);
  field(out, "close_reason", relay::close_reason_name(r.reason));
  if (!r.dial_cause.empty()) field(out, "dial_cause", r.dial_cause);
  if (!r.error.empty()) field(out, "error", r.error);
  out += "}\n";
  return out;
}

Result<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& path, uint32_t max_lines_per_second) {
  if (path == "journal")
    return std::unique_ptr<AccessLog>(new AccessLog(UniqueFd(), STDERR_FILENO, max_lines_per_second));
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
  if (!fd) return errno_error("log.access.path: open " + path, errno, Code::failed_precondition);
  const int out = fd.get();
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(fd), out, max_lines_per_second));
}

AccessLog::AccessLog(UniqueFd fd, int out, uint32_t per_second)
    : fd_(std::move(fd)), out_(out), per_second_(per_second), thread_([this] { run(); }) {}

AccessLog::~AccessLog() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool AccessLog::admit() {
  const auto now = std::chrono::steady_clock::now();
  if (now - window_ >= std::chrono::seconds(1)) {
    window_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_ || queue_.size() >= kMaxQueued) return false;
  ++in_window_;
  return true;
}

void AccessLog::write(std::string line) {
  {
    std::lock_guard lk(mu_);
    if (!admit()) {
      ++dropped_unreported_;
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (dropped_unreported_ != 0) {
      queue_.push_back("{\"dropped\":" + std::to_string(dropped_unreported_) + "}\n");
      dropped_unreported_ = 0;
    }
    queue_.push_back(std::move(line));
  }
  cv_.notify_one();
}

void AccessLog::run() {
  std::deque<std::string> batch;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) return;
      batch.swap(queue_);
    }
    std::string chunk;
    for (auto& line : batch) chunk += line;
    // A failed write (disk full) loses these lines, counted; the next ones try again.
    if (write_all(out_, chunk))
      written_.fetch_add(batch.size(), std::memory_order_relaxed);
    else
      dropped_.fetch_add(batch.size(), std::memory_order_relaxed);
    batch.clear();
  }
}

}  // namespace kib::dataplane
