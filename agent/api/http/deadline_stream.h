#pragma once
// The time limits of one API connection around the stream it reads: api.idle_timeout
// while it waits for a request, and api.request_timeout for a whole request (headers
// and body, however slowly they trickle in). It also tells the server since when the
// connection waits idle, so that a listener at its cap can shed the oldest idle
// connection for a new client.
#include <atomic>
#include <chrono>
#include <optional>

#include "agent/api/http/byte_stream.h"

namespace kib::api {

class DeadlineStream final : public ByteStream {
 public:
  using Clock = std::chrono::steady_clock;
  // idle_since: written with the time (Clock, ms) the connection began to wait for a
  // request, -1 while a request is received.
  DeadlineStream(ByteStream& inner, int fd, std::chrono::milliseconds idle_timeout,
                 std::chrono::milliseconds request_timeout, std::atomic<int64_t>& idle_since)
      : inner_(inner),
        fd_(fd),
        idle_timeout_(idle_timeout),
        request_timeout_(request_timeout),
        idle_since_(idle_since) {}

  // < 0 with errno ETIMEDOUT once the pending request's deadline passed.
  ssize_t read(void* buf, size_t len) override;
  bool write_all(const void* data, size_t len) override { return inner_.write_all(data, len); }
  void request_pending_since(std::optional<Clock::time_point> began) override { began_ = began; }
  void holds_waiting_stream(bool waiting) override { waiting_ = waiting; }
  void end_reads_by(Clock::time_point until) override { reads_end_ = until; }
  // timed_out once the idle timeout or the pending request's deadline passed.
  Wait wait_readable(int wake_fd) override;
  bool buffered() const override { return inner_.buffered(); }

  static int64_t now_ms();

 private:
  // The time this read or wait may take (nullopt: the request's deadline or
  // end_reads_by passed), and the idle mark the server sheds by.
  std::optional<std::chrono::milliseconds> time_left();
  void set_read_timeout(std::chrono::milliseconds t);

  ByteStream& inner_;
  const int fd_;
  const std::chrono::milliseconds idle_timeout_;
  const std::chrono::milliseconds request_timeout_;
  std::atomic<int64_t>& idle_since_;
  std::optional<Clock::time_point> began_;
  bool waiting_ = false;
  std::optional<Clock::time_point> reads_end_;
  std::chrono::milliseconds timeout_set_{-1};
};

}  // namespace kib::api
