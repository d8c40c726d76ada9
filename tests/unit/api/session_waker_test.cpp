// Waking a connection's session from another thread: the eventfd it polls beside its
// socket (SessionWaker, DeadlineStream::wait_readable), the idle mark a waiting
// stream (a health Watch) clears, and the bound on a drain's reads (end_reads_by).
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
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

}  // namespace

TEST_CASE("a wake from another thread ends the wait of a session blocked on its socket") {
  Pair p;
  auto waker = SessionWaker::create();
  REQUIRE(waker.ok());
  SocketStream socket(p.server.get());
  std::atomic<int64_t> idle{-1};
  DeadlineStream s(socket, p.server.get(), 60s, 30s, idle);
  std::thread other([w = *waker] { w->wake(); });
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::woken);
  other.join();
  (*waker)->clear();
  // Taken: the next wait is for the socket again.
  REQUIRE(::send(p.client.get(), "x", 1, 0) == 1);
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::readable);
  char c = 0;
  CHECK(s.read(&c, 1) == 1);
}

TEST_CASE("the wait ends at the idle timeout with nothing read") {
  Pair p;
  auto waker = SessionWaker::create();
  REQUIRE(waker.ok());
  SocketStream socket(p.server.get());
  std::atomic<int64_t> idle{-1};
  DeadlineStream s(socket, p.server.get(), 50ms, 30s, idle);
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::timed_out);
  CHECK(idle.load() >= 0);  // idle: a listener at its cap may shed it
}

TEST_CASE("the peer's close is readable, so that read() reports it") {
  Pair p;
  auto waker = SessionWaker::create();
  REQUIRE(waker.ok());
  SocketStream socket(p.server.get());
  std::atomic<int64_t> idle{-1};
  DeadlineStream s(socket, p.server.get(), 60s, 30s, idle);
  p.client.reset();
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::readable);
  char c = 0;
  CHECK(s.read(&c, 1) == 0);
}

TEST_CASE("a connection holding a stream that waits for events is not idle") {
  Pair p;
  auto waker = SessionWaker::create();
  REQUIRE(waker.ok());
  SocketStream socket(p.server.get());
  std::atomic<int64_t> idle{-1};
  DeadlineStream s(socket, p.server.get(), 20ms, 30s, idle);
  s.holds_waiting_stream(true);
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::timed_out);
  CHECK(idle.load() == -1);
  s.holds_waiting_stream(false);
  CHECK(s.wait_readable((*waker)->fd()) == ByteStream::Wait::timed_out);
  CHECK(idle.load() >= 0);
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
  Pair p;
  SocketStream socket(p.server.get());
  std::atomic<int64_t> idle{-1};
  DeadlineStream s(socket, p.server.get(), 60s, 30s, idle);
  const auto start = std::chrono::steady_clock::now();
  s.end_reads_by(start + 100ms);
  char c = 0;
  CHECK(s.read(&c, 1) < 0);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(s.read(&c, 1) < 0);  // past it: at once
}
