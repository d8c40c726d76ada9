#pragma once
// What the event-loop unit tests share: a real ring on the test thread with a clock
// the test steps (no sleeping for timers), bounded driving (a wall-clock cap, never an
// unbounded wait), a non-blocking loopback "guest" and an fd count for leak checks.
#include <arpa/inet.h>
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>

#include "agent/common/unique_fd.h"
#include "tests/unit/uring/step_clock.h"
#include "uring/loop.h"

namespace kib::test {

inline int count_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the DIR's own
}

// Pipes open in this process (splice's, when a flow went bulk).
inline int count_pipes() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  char target[64];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t len = readlink(path.c_str(), target, sizeof target - 1);
    if (len > 5 && std::string(target, 5) == "pipe:") ++n;
  }
  closedir(d);
  return n;
}

struct TestLoop {
  StepClock clock;
  std::unique_ptr<uring::Loop> loop;

  // buffers_posted: how many provided buffers sit in the ring (few: recvs run dry).
  explicit TestLoop(uint32_t file_slots = 0, uint32_t buffers_posted = 32) {
    uring::LoopOptions o;
    o.sq_entries = 256;
    o.buffer_count = 64;
    o.buffers_posted = buffers_posted;
    o.file_slots = file_slots;
    o.clock = clock.fn();
    auto l = uring::Loop::create(o);
    REQUIRE(l.ok());
    loop = std::move(l.value());
  }
  uring::Loop& operator*() { return *loop; }

  // One round: waits at most ~2 ms (real time) for completions.
  void run_once() {
    static const __kernel_timespec kWait{0, 2'000'000};
    io_uring_prep_timeout(loop->sqe(nullptr, 0), const_cast<__kernel_timespec*>(&kWait), 0, 0);
    loop->run_once();
  }
  // Runs rounds (each calling between() first) until pred() holds; false after
  // cap_ms of real time.
  template <typename P, typename B>
  bool drive(P pred, B between, int cap_ms = 5000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(cap_ms);
    for (;;) {
      between();
      if (pred()) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      run_once();
    }
  }
  template <typename P>
  bool drive(P pred, int cap_ms = 5000) {
    return drive(
        pred, [] {}, cap_ms);
  }
  // Real time passes for ms while the loop runs (for what the test cannot observe).
  void settle(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    drive([&] { return std::chrono::steady_clock::now() > until; }, ms + 1000);
  }
  // Steps the loop's clock (timers due by then fire).
  void step(uint64_t ms) { clock.step(*loop, ms); }
};

// A loopback listener standing in for the TPROXY one: what it accepts is a guest
// connection whose "original destination" is the listener's own address.
struct GuestListener {
  UniqueFd fd;
  sockaddr_in addr{};
  GuestListener() {
    fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd.get(), 64) == 0);
    REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  }
  uint16_t port() const { return ntohs(addr.sin_port); }
};

// The guest's end of a connection, non-blocking, pumped by the test between rounds.
struct Guest {
  UniqueFd fd;
  std::string out;
  size_t out_off = 0;
  bool shut_when_sent = false;
  bool shut = false;
  std::string in;
  bool eof = false;
  int error = 0;  // errno of a failed recv/send (ECONNRESET: the relay reset it)

  // Connects to addr (loopback: completes at once), then non-blocking.
  explicit Guest(const sockaddr_in& addr) {
    fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    const int err = rc == 0 ? 0 : errno;
    CAPTURE(ntohs(addr.sin_port));
    REQUIRE(err == 0);
    REQUIRE(::fcntl(fd.get(), F_SETFL, O_NONBLOCK) == 0);
  }
  void send(const std::string& s, bool then_shut = false) {
    out += s;
    shut_when_sent = then_shut;
  }
  bool done_sending() const { return out_off == out.size(); }
  void pump() {
    if (!fd) return;
    while (error == 0 && out_off < out.size()) {
      ssize_t w = ::send(fd.get(), out.data() + out_off, out.size() - out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        out_off += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno != EAGAIN) error = errno;
      break;
    }
    if (shut_when_sent && !shut && out_off == out.size() && error == 0) {
      ::shutdown(fd.get(), SHUT_WR);
      shut = true;
    }
    char buf[65536];
    while (!eof && error == 0) {
      ssize_t r = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        in.append(buf, static_cast<size_t>(r));
      } else if (r == 0) {
        eof = true;
      } else {
        if (errno != EAGAIN) error = errno;
        break;
      }
    }
  }
  bool reset() const { return error == ECONNRESET; }
};

}  // namespace kib::test
