// The one operation-owner lifecycle (op_owner.h), the one intrusive list and the one
// socket handle, on a real ring.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "uring/intrusive_list.h"
#include "uring/loop.h"
#include "uring/op_owner.h"
#include "uring/socket_handle.h"

using namespace kib;
using namespace kib::uring;

namespace {

std::unique_ptr<Loop> make_loop() {
  LoopOptions o;
  o.sq_entries = 64;
  o.buffer_count = 8;
  o.buffer_size = 4096;
  auto l = Loop::create(o);
  REQUIRE(l.ok());
  return std::move(l.value());
}

template <typename P>
void run_until(Loop& l, P pred) {
  for (int i = 0; i < 1000 && !pred(); ++i) {
    l.post([] {});
    l.run_once();
  }
}

struct Pair {
  int a = -1, b = -1;
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, &a) == 0); }
  ~Pair() {
    ::close(a);
    ::close(b);
  }
};

// Records its CQEs; counts releases; optionally closes itself from a handler.
struct Probe final : OpOwner {
  explicit Probe(Loop& l) : OpOwner(l) {}
  struct Event {
    unsigned tag;
    int32_t res;
  };
  std::vector<Event> events;
  int released = 0;
  bool close_on_complete = false;
  bool in_flight_at_release = true;

  void poll(unsigned tag, int fd, unsigned mask) {
    io_uring_sqe* s = start_op(tag);
    io_uring_prep_poll_add(s, fd, mask);
  }
  void close() { close_ops(); }
  using OpOwner::closing;
  using OpOwner::hold;
  using OpOwner::in_flight;
  using OpOwner::unhold;
  void on_complete(unsigned tag, int32_t res, uint32_t) override {
    events.push_back({tag, res});
    if (close_on_complete) close_ops();
    CHECK(released == 0);  // a release never comes inside a handler
  }
  void on_released() override {
    in_flight_at_release = any_in_flight();
    ++released;
  }
};

}  // namespace

TEST_CASE("an owner with nothing in flight is released as soon as it closes") {
  auto l = make_loop();
  Probe p(*l);
  p.close();
  CHECK(p.released == 1);
  p.close();
  CHECK(p.released == 1);  // once
}

TEST_CASE("close cancels every in-flight operation and releases after the last CQE") {
  auto l = make_loop();
  Pair s;
  Probe p(*l);
  p.poll(0, s.a, POLLIN);
  p.poll(5, s.b, POLLIN);
  CHECK(p.in_flight(0));
  CHECK(p.in_flight(5));
  p.close();
  CHECK(p.released == 0);  // the CQEs have not come yet
  run_until(*l, [&] { return p.released == 1; });
  REQUIRE(p.events.size() == 2);
  for (const auto& e : p.events) CHECK(e.res == -ECANCELED);
  CHECK(p.released == 1);
  CHECK(!p.in_flight_at_release);
}

TEST_CASE("a close from inside a handler releases only after the handler returned") {
  auto l = make_loop();
  Pair s;
  Probe p(*l);
  p.close_on_complete = true;
  p.poll(2, s.a, POLLIN);
  REQUIRE(write(s.b, "x", 1) == 1);
  run_until(*l, [&] { return p.released == 1; });
  REQUIRE(p.events.size() == 1);
  CHECK(p.events[0].tag == 2u);
  CHECK(p.events[0].res > 0);
}

TEST_CASE("an operation started after close is cancelled, so the release still comes") {
  auto l = make_loop();
  Pair s;
  Probe p(*l);
  p.hold(7);  // keeps the owner from being released by close()
  p.close();
  p.poll(1, s.a, POLLIN);  // nothing will ever arrive on it
  p.unhold(7);
  CHECK(p.released == 0);
  run_until(*l, [&] { return p.released == 1; });
  REQUIRE(p.events.size() == 1);
  CHECK(p.events[0].res == -ECANCELED);
}

TEST_CASE("a held event that is not an SQE delays the release until unhold") {
  auto l = make_loop();
  Probe p(*l);
  p.hold(9);
  CHECK(p.in_flight(9));
  p.close();
  CHECK(p.released == 0);
  p.unhold(9);
  CHECK(p.released == 1);
}

TEST_CASE("a multishot operation stays in flight until a CQE without F_MORE") {
  auto l = make_loop();
  struct Acceptor final : OpOwner {
    explicit Acceptor(Loop& l) : OpOwner(l) {}
    int accepted = 0;
    int released = 0;
    std::vector<bool> in_flight_after;
    void arm(int fd) {
      io_uring_sqe* s = start_op(0);
      io_uring_prep_multishot_accept(s, fd, nullptr, nullptr, SOCK_CLOEXEC);
    }
    void close() { close_ops(); }
    void on_complete(unsigned, int32_t res, uint32_t) override {
      if (res >= 0) {
        ++accepted;
        ::close(res);
      }
      in_flight_after.push_back(in_flight(0));
    }
    void on_released() override { ++released; }
  } a(*l);
  UniqueFd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  REQUIRE(listen(lfd.get(), 8) == 0);
  a.arm(lfd.get());
  for (int i = 0; i < 2; ++i) {
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  run_until(*l, [&] { return a.accepted == 2; });
  REQUIRE(a.in_flight_after.size() == 2);
  CHECK(a.in_flight_after[0]);
  CHECK(a.in_flight_after[1]);
  a.close();
  CHECK(a.released == 0);
  run_until(*l, [&] { return a.released == 1; });
  CHECK(a.released == 1);
}

namespace {
struct Item : ListNode<Item> {
  explicit Item(int v) : value(v) {}
  int value;
};
std::vector<int> values(IntrusiveList<Item>& l) {
  std::vector<int> v;
  l.for_each([&](Item& i) { v.push_back(i.value); });
  return v;
}
}  // namespace

TEST_CASE("the intrusive list keeps order, unlinks from the element, and survives unlinking while walking") {
  IntrusiveList<Item> list;
  Item a(1), b(2), c(3);
  list.push_back(b);
  list.push_back(c);
  list.push_front(a);
  CHECK(values(list) == std::vector<int>{1, 2, 3});
  CHECK(list.size() == 3);
  b.unlink();
  CHECK(!b.linked());
  CHECK(values(list) == std::vector<int>{1, 3});
  list.for_each([](Item& i) { i.unlink(); });
  CHECK(list.empty());
  {
    Item d(4);
    list.push_back(d);
    CHECK(list.front() == &d);
  }  // destroyed while linked: unlinked
  CHECK(list.empty());
  list.push_back(a);
  CHECK(list.pop_front() == &a);
  CHECK(list.pop_front() == nullptr);
}

TEST_CASE("a socket handle closes its fd, with an RST when reset") {
  for (bool reset : {false, true}) {
    CAPTURE(reset);
    UniqueFd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    REQUIRE(listen(lfd.get(), 1) == 0);
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    SocketHandle h(UniqueFd(accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC)));
    REQUIRE(h.valid());
    REQUIRE(h.fd() >= 0);
    if (reset) h.reset_on_close();
    h.close();
    CHECK(!h.valid());
    char c;
    const ssize_t n = read(client.get(), &c, 1);
    if (reset) {
      CHECK(n < 0);
      CHECK(errno == ECONNRESET);
    } else {
      CHECK(n == 0);
    }
  }
}
