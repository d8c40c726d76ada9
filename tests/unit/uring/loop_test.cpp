// The io_uring loop: probe, timers, cross-thread post, cancel-then-close, provided
// buffers with ENOBUFS and waiters.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "tests/unit/uring/step_clock.h"
#include "uring/loop.h"
#include "uring/probe.h"

using namespace kib::uring;

namespace {

std::unique_ptr<Loop> make_loop(uint32_t buffers = 8, uint32_t size = 4096, kib::test::StepClock* clock = nullptr) {
  LoopOptions o;
  o.sq_entries = 64;
  o.buffer_count = buffers;
  o.buffer_size = size;
  if (clock != nullptr) o.clock = clock->fn();
  auto l = Loop::create(o);
  REQUIRE(l.ok());
  return std::move(l.value());
}

struct Recorder final : Completion {
  struct Event {
    unsigned tag;
    int32_t res;
    uint32_t flags;
  };
  std::vector<Event> events;
  void complete(unsigned tag, int32_t res, uint32_t flags) override { events.push_back({tag, res, flags}); }
};

struct Fired final : TimerHandler {
  int count = 0;
  uint64_t at = 0;
  Loop* loop = nullptr;
  void on_timer(Timer&) override {
    ++count;
    at = loop->now_ms();
  }
};

void submit_recv(Loop& l, Recorder& r, unsigned tag, int fd) {
  io_uring_sqe* s = l.sqe(&r, tag);
  io_uring_prep_recv(s, fd, nullptr, l.buffers().buffer_size(), 0);
  s->flags |= IOSQE_BUFFER_SELECT;
  s->buf_group = l.buffers().group_id();
}

// Runs the loop until pred() holds (each iteration wakes on a posted no-op).
template <typename P>
void run_until(Loop& l, P pred) {
  for (int i = 0; i < 1000 && !pred(); ++i) l.run_once();
}

}  // namespace

TEST_CASE("the kernel probe accepts this kernel") { CHECK(probe_kernel_features().ok()); }

TEST_CASE("a timer fires at its deadline, not before") {
  kib::test::StepClock clock;
  auto l = make_loop(8, 4096, &clock);
  Fired f;
  f.loop = l.get();
  Timer t(&f);
  const uint64_t start = l->now_ms();
  CHECK(start == clock.now);
  l->timers().arm(t, start + 120);
  clock.step(*l, 100);
  CHECK(f.count == 0);
  clock.step(*l, 50);  // the deadline rounds up to the wheel's 50 ms tick
  CHECK(f.count == 1);
  CHECK(f.at >= start + 120);
  CHECK(!t.armed());
  CHECK(l->timers().empty());
}

TEST_CASE("a cancelled timer never fires") {
  kib::test::StepClock clock;
  auto l = make_loop(8, 4096, &clock);
  Fired f, g;
  f.loop = g.loop = l.get();
  Timer a(&f), b(&g);
  l->timers().arm(a, clock.now + 50);
  l->timers().arm(b, clock.now + 150);
  a.cancel();
  CHECK(l->timers().size() == 1);
  clock.step(*l, 200);
  CHECK(f.count == 0);
  CHECK(g.count == 1);
}

TEST_CASE("a timer re-armed from its own handler fires again at the new deadline") {
  kib::test::StepClock clock;
  auto l = make_loop(8, 4096, &clock);
  struct Again final : TimerHandler {
    Loop* loop = nullptr;
    int count = 0;
    void on_timer(Timer& t) override {
      if (++count < 3) loop->timers().arm(t, loop->now_ms() + 100);
    }
  } h;
  h.loop = l.get();
  Timer t(&h);
  l->timers().arm(t, clock.now + 100);
  for (int i = 0; i < 5; ++i) clock.step(*l, 100);
  CHECK(h.count == 3);
  CHECK(!t.armed());
}

TEST_CASE("post runs the function on the loop thread") {
  auto l = make_loop();
  std::thread::id ran_on;
  std::thread other([&] {
    l->post([&] {
      ran_on = std::this_thread::get_id();
      l->request_stop();
    });
  });
  other.join();
  l->run();
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("a cancelled operation still reports its own CQE (ECANCELED) before its owner may go") {
  auto l = make_loop();
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Recorder r;
  submit_recv(*l, r, 3, sv[0]);
  l->cancel(&r, 3);
  run_until(*l, [&] { return !r.events.empty(); });
  REQUIRE(r.events.size() == 1);
  CHECK(r.events[0].tag == 3);
  CHECK(r.events[0].res == -ECANCELED);
  CHECK((r.events[0].flags & IORING_CQE_F_BUFFER) == 0u);  // no buffer to free on a cancel
  close(sv[0]);
  close(sv[1]);
}

TEST_CASE("a recv picks a provided buffer only when data arrives") {
  auto l = make_loop();
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Recorder r;
  submit_recv(*l, r, 1, sv[0]);
  REQUIRE(write(sv[1], "abc", 3) == 3);
  run_until(*l, [&] { return !r.events.empty(); });
  REQUIRE(r.events.size() == 1);
  CHECK(r.events[0].res == 3);
  REQUIRE((r.events[0].flags & IORING_CQE_F_BUFFER) != 0u);
  uint16_t bid = static_cast<uint16_t>(r.events[0].flags >> IORING_CQE_BUFFER_SHIFT);
  l->buffers().note_picked();
  CHECK(std::string(reinterpret_cast<char*>(l->buffers().data(bid)), 3) == "abc");
  l->give_back(bid);
  CHECK(l->buffers().outstanding() == 0);
  close(sv[0]);
  close(sv[1]);
}

namespace {
struct Waiter final : BufferWaiter {
  int woken = 0;
  void on_buffer_available() override { ++woken; }
};
}  // namespace

TEST_CASE("an empty buffer ring gives ENOBUFS; returning a buffer wakes a waiter") {
  auto l = make_loop(1, 64);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Recorder r;
  submit_recv(*l, r, 1, sv[0]);
  REQUIRE(write(sv[1], "x", 1) == 1);
  run_until(*l, [&] { return r.events.size() == 1; });
  REQUIRE(r.events[0].res == 1);
  uint16_t bid = static_cast<uint16_t>(r.events[0].flags >> IORING_CQE_BUFFER_SHIFT);
  l->buffers().note_picked();
  submit_recv(*l, r, 2, sv[0]);
  REQUIRE(write(sv[1], "y", 1) == 1);
  run_until(*l, [&] { return r.events.size() == 2; });
  CHECK(r.events[1].res == -ENOBUFS);
  Waiter w;
  l->wait_for_buffer(w);
  CHECK(w.waiting());
  l->give_back(bid);
  CHECK(w.woken == 1);
  CHECK(!w.waiting());
  close(sv[0]);
  close(sv[1]);
}
