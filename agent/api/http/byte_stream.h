#pragma once
// A connected byte stream the HTTP sessions read and write: a plain socket or a TLS
// session over one. Blocking, with the socket's SO_RCVTIMEO/SO_SNDTIMEO as the idle
// timeout.
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <optional>

namespace kib::api {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // > 0 bytes read; 0 at end of stream; < 0 on error or timeout.
  virtual ssize_t read(void* buf, size_t len) = 0;
  // Writes everything or returns false.
  virtual bool write_all(const void* data, size_t len) = 0;
  // The session tells, before each read, since when the oldest request it is still
  // receiving began (nullopt: none, the connection waits for one). A stream that
  // enforces api.request_timeout (DeadlineStream) ends the read at that deadline.
  virtual void request_pending_since(std::optional<std::chrono::steady_clock::time_point>) {}
  // Reads end by `until` at the latest (< 0, ETIMEDOUT), whatever else allows: the
  // bounded drain before a close. A stream without a deadline of its own ignores it.
  virtual void end_reads_by(std::chrono::steady_clock::time_point until) { (void)until; }
  // The session tells, before each wait, whether it holds a stream that waits for
  // events rather than for the client (a health Watch): the connection is not idle.
  virtual void holds_waiting_stream(bool) {}

  enum class Wait { readable, woken, timed_out };
  // Waits until read() has something to return (bytes, the end, an error), `wake_fd` is
  // readable, or the stream's time limit passes. A stream that cannot poll says
  // readable at once: its read() then blocks as before, and wakes wait for it.
  virtual Wait wait_readable(int wake_fd) {
    (void)wake_fd;
    return Wait::readable;
  }
  // Bytes already inside the stream (a TLS record), which polling the socket misses.
  virtual bool buffered() const { return false; }
};

// A plain socket; does not own the fd.
class SocketStream final : public ByteStream {
 public:
  explicit SocketStream(int fd) : fd_(fd) {}
  ssize_t read(void* buf, size_t len) override {
    for (;;) {
      ssize_t n = ::recv(fd_, buf, len, 0);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }
  bool write_all(const void* data, size_t len) override {
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
      ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      len -= static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int fd_;
};

}  // namespace kib::api
