// Waking a connection's session from another thread: the eventfd it polls beside its
// socket (SessionWaker, DeadlineStream::wait_readable), the idle mark a waiting
// stream (a health Watch) clears, and the bound on a drain's reads (end_reads_by).
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/deadline_stream.h"
#include "agent/api/http/session_waker.h"
#include "agent/common/unique_fd.h"

using namespace kib;
using namespace kib::api;
using namespace std::chrono_literals;

namespace {

struct Pair {
  UniqueFd client, server;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    client = UniqueFd(fds[0]);
    server = UniqueFd(fds[1]);
  }
};

// A session's stream over one end of a socket pair, with its waker and idle mark.
struct Session {
  Pair p;
  std::shared_ptr<SessionWaker> waker;
  SocketStream socket{p.server.get()};
  std::atomic<int64_t> idle{-1};
  DeadlineStream stream;
  explicit Session(std::chrono::milliseconds idle_timeout)
      : waker(make_waker()), stream(socket, p.server.get(), idle_timeout, 30s, idle) {}
  static std::shared_ptr<SessionWaker> make_waker() {
    auto w = SessionWaker::create();
    REQUIRE(w.ok());
    return std::move(*w);
  }
  ByteStream::Wait wait() { return stream.wait_readable(waker->fd()); }
};

}  // namespace

TEST_CASE("a wake from another thread ends the wait of a session blocked on its socket") {
  Session t(60s);
  std::thread other([w = t.waker] { w->wake(); });
  CHECK(t.wait() == ByteStream::Wait::woken);
  other.join();
  t.waker->clear();
  // Taken: the next wait is for the socket again.
  REQUIRE(::send(t.p.client.get(), "x", 1, 0) == 1);
  CHECK(t.wait() == ByteStream::Wait::readable);
  char c = 0;
  CHECK(t.stream.read(&c, 1) == 1);
}

TEST_CASE("the wait ends at the idle timeout with nothing read") {
  Session t(50ms);
  CHECK(t.wait() == ByteStream::Wait::timed_out);
  CHECK(t.idle.load() >= 0);  // idle: a listener at its cap may shed it
}

TEST_CASE("the peer's close is readable, so that read() reports it") {
  Session t(60s);
  t.p.client.reset();
  CHECK(t.wait() == ByteStream::Wait::readable);
  char c = 0;
  CHECK(t.stream.read(&c, 1) == 0);
}

TEST_CASE("a connection holding a stream that waits for events is not idle") {
  Session t(20ms);
  t.stream.holds_waiting_stream(true);
  CHECK(t.wait() == ByteStream::Wait::timed_out);
  CHECK(t.idle.load() == -1);
  t.stream.holds_waiting_stream(false);
  CHECK(t.wait() == ByteStream::Wait::timed_out);
  CHECK(t.idle.load() >= 0);
}

TEST_CASE("stop wakes the session and says so") {
  auto waker = SessionWaker::create();
  REQUIRE(waker.ok());
  CHECK(!(*waker)->stopping());
  (*waker)->stop();
  CHECK((*waker)->stopping());
  pollfd pfd{(*waker)->fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 1);
}

TEST_CASE("end_reads_by bounds a read the idle timeout would let block") {
  Session t(60s);
  const auto start = std::chrono::steady_clock::now();
  t.stream.end_reads_by(start + 100ms);
  char c = 0;
  CHECK(t.stream.read(&c, 1) < 0);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(t.stream.read(&c, 1) < 0);  // past it: at once
}
