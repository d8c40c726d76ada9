// SplicePipe on real loopback TCP sockets: bytes arrive whole and in order, a full
// destination keeps them in the pipe, EOF only once the pipe is empty, errors surface.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "agent/common/unique_fd.h"
#include "agent/relay/splice_pipe.h"

using kib::UniqueFd;
using kib::relay::SplicePipe;
using Step = SplicePipe::Step;

namespace {

struct TcpPair {
  UniqueFd a, b;  // connected: what a writes, b reads
};

// rcvbuf > 0: the accepted side's receive buffer, forced (root), so that it can hold
// all of a test's bytes before anyone reads.
TcpPair tcp_pair(int rcvbuf = 0) {
  UniqueFd l(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (rcvbuf > 0) REQUIRE(setsockopt(l.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(bind(l.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(l.get(), 1) == 0);
  REQUIRE(getsockname(l.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  TcpPair p;
  p.a.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(connect(p.a.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  p.b.reset(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(p.b.valid());
  return p;
}

std::vector<uint8_t> pattern(size_t n) {  // no repeating aligned chunk
  std::vector<uint8_t> v(n);
  uint32_t x = 2463534242u;
  for (auto& c : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<uint8_t>(x);
  }
  return v;
}

void write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    REQUIRE(w > 0);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

size_t read_some(int fd, std::vector<uint8_t>& out) {
  uint8_t buf[65536];
  ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (r <= 0) return 0;
  out.insert(out.end(), buf, buf + r);
  return static_cast<size_t>(r);
}

// Queues all of `data` and a FIN at in.b before anyone reads it (bounded wait).
void queue_with_fin(TcpPair& in, const std::vector<uint8_t>& data) {
  size_t sent = 0;
  for (int i = 0; i < 20000 && sent < data.size(); ++i) {
    ssize_t w = send(in.a.get(), data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0)
      sent += static_cast<size_t>(w);
    else
      usleep(100);
  }
  REQUIRE(sent == data.size());
  REQUIRE(shutdown(in.a.get(), SHUT_WR) == 0);
  int queued = 0;
  auto all_queued = [&] {
    return ioctl(in.b.get(), FIONREAD, &queued) == 0 && static_cast<size_t>(queued) == data.size();
  };
  for (int i = 0; i < 20000 && !all_queued(); ++i) usleep(100);
  REQUIRE(static_cast<size_t>(queued) == data.size());
}

// Source pair `in` (the test writes in.a, the pipe reads in.b) and destination pair
// `out` (the pipe writes out.a, the test reads out.b), non-blocking where splice works.
struct Rig {
  explicit Rig(int rcvbuf = 0) : in(tcp_pair(rcvbuf)), out(tcp_pair(rcvbuf)), pipe(SplicePipe::open()) {
    REQUIRE(kib::relay::set_nonblocking(in.b.get()));
    REQUIRE(kib::relay::set_nonblocking(out.a.get()));
    REQUIRE(pipe);
  }
  TcpPair in, out;
  std::unique_ptr<SplicePipe> pipe;
};

}  // namespace

TEST_CASE("splice moves every byte in order and reports EOF only with an empty pipe") {
  Rig r;
  auto& [in, out, pipe] = r;
  const auto data = pattern(3 << 20);
  std::vector<uint8_t> got;
  size_t sent = 0, moved = 0;
  bool eof = false;
  for (int round = 0; round < 100000 && !eof; ++round) {
    if (sent < data.size()) {
      size_t n = std::min<size_t>(100000, data.size() - sent);  // not page-aligned
      write_all(in.a.get(), data.data() + sent, n);
      sent += n;
      if (sent == data.size()) shutdown(in.a.get(), SHUT_WR);
    }
    int err = 0;
    Step s = pipe->pump(in.b.get(), out.a.get(), 1 << 20, &moved, &err);
    REQUIRE(s != Step::error);
    if (s == Step::eof) {
      CHECK(pipe->pending() == 0);
      eof = true;
    }
    while (read_some(out.b.get(), got) > 0) {
    }
  }
  REQUIRE(eof);
  while (got.size() < data.size() && read_some(out.b.get(), got) > 0) {
  }
  CHECK(moved == data.size());
  CHECK(got == data);
}

TEST_CASE("a destination that takes no more keeps the rest in the pipe") {
  Rig r;
  auto& [in, out, pipe] = r;
  const auto data = pattern(8 << 20);
  size_t moved = 0;
  int err = 0;
  Step s = Step::src_empty;
  size_t sent = 0;
  // Nobody reads out.b: the destination fills up.
  for (int i = 0; i < 1000 && s != Step::dst_full; ++i) {
    if (sent < data.size()) {
      ssize_t w = send(in.a.get(), data.data() + sent, std::min<size_t>(65536, data.size() - sent),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += static_cast<size_t>(w);
    }
    s = pipe->pump(in.b.get(), out.a.get(), 64 << 20, &moved, &err);
    REQUIRE(s != Step::error);
  }
  REQUIRE(s == Step::dst_full);
  CHECK(pipe->pending() > 0);
  // Reading makes room: the pipe empties into the destination first.
  std::vector<uint8_t> got;
  while (read_some(out.b.get(), got) > 0) {
  }
  size_t before = moved;
  s = pipe->pump(in.b.get(), out.a.get(), 1, &moved, &err);
  CHECK(moved > before);
  CHECK(s == Step::yielded);
}

TEST_CASE("a reset source is an error, not an EOF") {
  Rig r;
  auto& [in, out, pipe] = r;
  linger l{1, 0};
  REQUIRE(setsockopt(in.a.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0);
  in.a.reset();  // sends RST
  size_t moved = 0;
  int err = 0;
  Step s = pipe->pump(in.b.get(), out.a.get(), 1 << 20, &moved, &err);
  CHECK(s == Step::error);
  CHECK(err == ECONNRESET);
}

TEST_CASE("an empty source waits") {
  Rig r;
  auto& [in, out, pipe] = r;
  size_t moved = 0;
  int err = 0;
  CHECK(pipe->pump(in.b.get(), out.a.get(), 1 << 20, &moved, &err) == Step::src_empty);
  CHECK(moved == 0);
}

TEST_CASE("stop_when_drained: a read that took less than half the pipe ends the pump once its bytes are out") {
  const auto data = pattern(10000);
  for (bool stop : {true, false}) {
    CAPTURE(stop);
    Rig r;
    auto& [in, out, pipe] = r;
    queue_with_fin(in, data);
    size_t moved = 0;
    int err = 0;
    Step s = pipe->pump(in.b.get(), out.a.get(), 64 << 20, &moved, &err, stop);
    CHECK(moved == data.size());
    CHECK(pipe->pending() == 0);
    std::vector<uint8_t> got;
    while (got.size() < data.size() && read_some(out.b.get(), got) > 0) {
    }
    CHECK(got == data);
    if (stop) {
      // No second read: the FIN queued behind the bytes is seen by the next call.
      CHECK(s == Step::src_empty);
      CHECK(pipe->pump(in.b.get(), out.a.get(), 64 << 20, &moved, &err, stop) == Step::eof);
    } else {
      CHECK(s == Step::eof);
    }
  }
}

TEST_CASE("stop_when_drained: a read that took half the pipe or more reads on") {
  Rig r(8 << 20);
  auto& [in, out, pipe] = r;
  const auto data = pattern(3 << 20);  // more than any pipe of 1 MiB: full reads
  queue_with_fin(in, data);
  size_t moved = 0;
  int err = 0;
  CHECK(pipe->pump(in.b.get(), out.a.get(), 64 << 20, &moved, &err, true) == Step::eof);
  CHECK(moved == data.size());
  std::vector<uint8_t> got;
  while (got.size() < data.size() && read_some(out.b.get(), got) > 0) {
  }
  CHECK(got == data);
}
