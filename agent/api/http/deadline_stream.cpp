#include "agent/api/http/deadline_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

namespace kib::api {

int64_t DeadlineStream::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::optional<std::chrono::milliseconds> DeadlineStream::time_left() {
  std::chrono::milliseconds timeout = idle_timeout_;
  if (began_) {
    idle_since_.store(-1, std::memory_order_relaxed);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*began_ + request_timeout_ - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    timeout = std::min(timeout, left);
  } else if (waiting_) {
    // A stream waiting for events (a health Watch) is a call being served: a listener
    // at its cap does not shed it as idle.
    idle_since_.store(-1, std::memory_order_relaxed);
  } else if (idle_since_.load(std::memory_order_relaxed) < 0) {
    idle_since_.store(now_ms(), std::memory_order_relaxed);
  }
  if (reads_end_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*reads_end_ - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    timeout = std::min(timeout, left);
  }
  return timeout;
}

ssize_t DeadlineStream::read(void* buf, size_t len) {
  const auto timeout = time_left();
  if (!timeout) {
    errno = ETIMEDOUT;
    return -1;
  }
  set_read_timeout(*timeout);
  return inner_.read(buf, len);
}

ByteStream::Wait DeadlineStream::wait_readable(int wake_fd) {
  for (;;) {
    const auto timeout = time_left();
    if (!timeout) return Wait::timed_out;
    if (inner_.buffered()) return Wait::readable;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(1, timeout->count())));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return Wait::timed_out;
    // A wake first: the bytes stay for the next wait. A poll error: read() reports it.
    if (n > 0 && (fds[1].revents & POLLIN)) return Wait::woken;
    return Wait::readable;
  }
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
