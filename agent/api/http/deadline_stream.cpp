#include "agent/api/http/deadline_stream.h"

#include <sys/socket.h>

#include <algorithm>

namespace kib::api {

int64_t DeadlineStream::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

ssize_t DeadlineStream::read(void* buf, size_t len) {
  std::chrono::milliseconds timeout = idle_timeout_;
  if (began_) {
    idle_since_.store(-1, std::memory_order_relaxed);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*began_ + request_timeout_ - Clock::now());
    if (left.count() <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    timeout = std::min(timeout, left);
  } else if (idle_since_.load(std::memory_order_relaxed) < 0) {
    idle_since_.store(now_ms(), std::memory_order_relaxed);
  }
  set_read_timeout(timeout);
  return inner_.read(buf, len);
}

// SO_RCVTIMEO: a blocking read (the TLS session's too) ends after it with EAGAIN.
void DeadlineStream::set_read_timeout(std::chrono::milliseconds t) {
  if (t == timeout_set_) return;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;  // 0 would mean no timeout
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0) timeout_set_ = t;
}

}  // namespace kib::api
