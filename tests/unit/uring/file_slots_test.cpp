// Direct descriptors: the slot table, the probe, and sockets opened, used and closed
// by slot (a reset reaches the peer as RST, a plain close as FIN; a slot reused at
// once holds the new socket).
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "uring/loop.h"
#include "uring/probe.h"

using namespace kib::uring;

namespace {

struct Recorder final : Completion {
  std::vector<int32_t> res = std::vector<int32_t>(8, 1);  // 1: no CQE yet
  void complete(unsigned tag, int32_t r, uint32_t) override { res[tag] = r; }
};

// A loopback listener; its port in *port.
int listener(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd, 8) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

struct SlotSocket {
  sockaddr_in to{};
  Recorder r;
};

// Opens a socket into slot (tag 0) and connects it (tag 1) to 127.0.0.1:port.
void open_and_connect(Loop& l, SlotSocket& s, int slot, uint16_t port) {
  s.to.sin_family = AF_INET;
  s.to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  s.to.sin_port = htons(port);
  io_uring_sqe* q = l.sqe(&s.r, 0);
  io_uring_prep_socket_direct(q, AF_INET, SOCK_STREAM, 0, static_cast<unsigned>(slot), 0);
  io_uring_sqe_set_data64(q, encode_user_data(&s.r, 0));
  q = l.sqe(&s.r, 1);
  io_uring_prep_connect(q, slot, reinterpret_cast<sockaddr*>(&s.to), sizeof s.to);
  q->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(q, encode_user_data(&s.r, 1));
  for (int i = 0; i < 100 && s.r.res[1] == 1; ++i) l.run_once();
}

std::unique_ptr<Loop> loop_with_slots(uint32_t n) {
  LoopOptions o;
  o.sq_entries = 64;
  o.buffer_count = 8;
  o.buffer_size = 4096;
  o.file_slots = n;
  auto l = Loop::create(o);
  REQUIRE(l.ok());
  return std::move(l.value());
}

// What the peer's recv returns once the slot's socket is gone: 0 (FIN) or -errno.
int peer_sees(int peer) {
  char c;
  timeval tv{2, 0};
  setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = recv(peer, &c, 1, 0);
  return n < 0 ? -errno : static_cast<int>(n);
}

}  // namespace

TEST_CASE("this kernel has what direct-descriptor upstream sockets need") {
  kib::Status st = probe_direct_sockets();
  CHECK_MESSAGE(st.ok(), (st.ok() ? std::string() : st.error().message));
}

TEST_CASE("slots are handed out once each, reused most recent first, and counted") {
  auto l = loop_with_slots(3);
  FileSlots& t = l->slots();
  CHECK(t.capacity() == 3);
  CHECK(t.take() == 0);
  CHECK(t.take() == 1);
  CHECK(t.take() == 2);
  CHECK(t.take() == -1);
  CHECK(t.in_use() == 3);
  t.put(1);
  CHECK(t.in_use() == 2);
  CHECK(t.take() == 1);
  CHECK(t.take() == -1);
}

TEST_CASE("a loop without slots hands none out") {
  auto l = loop_with_slots(0);
  CHECK(l->slots().take() == -1);
  CHECK(l->slots().in_use() == 0);
}

TEST_CASE("a slot table the kernel refuses leaves the loop on plain fds, not failed") {
  rlimit rl{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  auto l = loop_with_slots(static_cast<uint32_t>(rl.rlim_cur) + 1);  // above the limit: EMFILE
  CHECK(l->slots().capacity() == 0);
  CHECK(l->slots().take() == -1);
}

TEST_CASE("close_slot sends FIN, or RST when resetting, and frees the slot for the next socket at once") {
  REQUIRE(probe_direct_sockets().ok());
  auto l = loop_with_slots(1);
  uint16_t port = 0;
  int lfd = listener(&port);
  for (bool reset : {false, true}) {
    CAPTURE(reset);
    const int slot = l->slots().take();
    REQUIRE(slot == 0);
    SlotSocket a;
    open_and_connect(*l, a, slot, port);
    REQUIRE(a.r.res[0] == 0);
    REQUIRE(a.r.res[1] == 0);
    int peer_a = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(peer_a >= 0);
    // Closed, then the same slot taken and opened again before anything is submitted:
    // the close runs first, so the new socket is the slot's, not closed by it.
    l->close_slot(slot, reset);
    CHECK(l->slots().in_use() == 0);
    const int again = l->slots().take();
    REQUIRE(again == slot);
    SlotSocket b;
    open_and_connect(*l, b, again, port);
    CHECK(b.r.res[0] == 0);
    CHECK(b.r.res[1] == 0);
    CHECK(peer_sees(peer_a) == (reset ? -ECONNRESET : 0));
    int peer_b = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(peer_b >= 0);
    l->close_slot(again, false);
    l->post([] {});  // a CQE to wake for: the close itself posts none
    l->run_once();   // the close goes out with this submit
    CHECK(peer_sees(peer_b) == 0);
    close(peer_a);
    close(peer_b);
  }
  close(lfd);
}
