#include "uring/loop.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "uring/socket_ops.h"

namespace kib::uring {

uint64_t Loop::monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

Loop::Loop(std::function<uint64_t()> clock)
    : clock_(clock ? std::move(clock) : std::function<uint64_t()>(&Loop::monotonic_ms)),
      now_ms_(clock_()),
      timers_(now_ms_) {}

Result<std::unique_ptr<Loop>> Loop::create(const LoopOptions& opts) {
  std::unique_ptr<Loop> l(new Loop(opts.clock));
  io_uring_params p{};
  // Completions run only when this thread asks for them: fewer interrupts, no IPIs.
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  int r = io_uring_queue_init_params(opts.sq_entries, &l->ring_, &p);
  if (r == -EINVAL) {
    p = io_uring_params{};
    r = io_uring_queue_init_params(opts.sq_entries, &l->ring_, &p);
  }
  if (r < 0) return Error{Code::failed_precondition, std::string("io_uring_queue_init: ") + strerror(-r)};
  l->ring_ok_ = true;
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return Error{Code::resource_exhausted, std::string("eventfd: ") + strerror(errno)};
  l->event_fd_.reset(efd);
  auto br = BufferRing::create(&l->ring_, 0, opts.buffer_count, opts.buffer_size, opts.buffers_posted);
  if (!br.ok()) return std::move(br).error();
  l->buffers_ = std::move(br.value());
  // Slots only spare fds: a table the kernel refuses (a lowered RLIMIT_NOFILE, kernel
  // memory) leaves the loop on plain fds, as on a kernel without direct descriptors.
  if (auto slots = FileSlots::register_on(&l->ring_, opts.file_slots); slots.ok()) l->slots_ = std::move(slots.value());
  l->arm_wakeup();
  return l;
}

Loop::~Loop() {
  buffers_.reset();
  if (ring_ok_) io_uring_queue_exit(&ring_);
}

io_uring_sqe* Loop::sqe(Completion* owner, unsigned tag) {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  while (s == nullptr) {
    io_uring_submit(&ring_);
    s = io_uring_get_sqe(&ring_);
  }
  io_uring_sqe_set_data64(s, owner == nullptr ? 0 : encode_user_data(owner, tag));
  return s;
}

void Loop::cancel(Completion* owner, unsigned tag) {
  io_uring_sqe* s = sqe(nullptr, 0);
  io_uring_prep_cancel64(s, encode_user_data(owner, tag), 0);  // its own CQE: user_data 0
}

// Both run inline, in order, when submitted (neither can block), so a later SQE
// that installs into the same slot finds it closed. Only failures post a CQE, and
// user_data 0 drops it: there is nothing left to tell.
void Loop::close_slot(int slot, bool reset) {
  static const linger kReset{1, 0};
  if (reset) {
    io_uring_sqe* s = sqe(nullptr, 0);
    prep_setsockopt_direct(s, slot, SOL_SOCKET, SO_LINGER, &kReset, sizeof kReset);
    s->flags |= IOSQE_CQE_SKIP_SUCCESS;
  }
  io_uring_sqe* s = sqe(nullptr, 0);
  io_uring_prep_close_direct(s, static_cast<unsigned>(slot));
  s->flags |= IOSQE_CQE_SKIP_SUCCESS;
  slots_.put(slot);
}

void Loop::arm_wakeup() {
  io_uring_sqe* s = sqe(this, kWakeTag);
  io_uring_prep_read(s, event_fd_.get(), &event_value_, sizeof event_value_, 0);
}

void Loop::arm_tick() {
  tick_ts_.tv_sec = 0;
  tick_ts_.tv_nsec = static_cast<long>(TimerWheel::kTickMs) * 1000000;
  io_uring_sqe* s = sqe(this, kTickTag);
  io_uring_prep_timeout(s, &tick_ts_, 0, 0);
  tick_armed_ = true;
}

void Loop::complete(unsigned tag, int32_t res, uint32_t) {
  if (tag == kWakeTag) {
    (void)res;
    wake_pending_.store(false, std::memory_order_release);
    run_posted();
    arm_wakeup();
  } else if (tag == kTickTag) {
    tick_armed_ = false;
  }
}

void Loop::run_posted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lk(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

// The wake-up is written under the lock too: the loop runs fn only after taking the
// lock, so fn (which may stop the loop, and its thread then destroy it) cannot run
// before the write is done with the eventfd (TSan saw the fd closed under the write).
void Loop::post(std::function<void()> fn) {
  std::lock_guard lk(posted_mu_);
  posted_.push_back(std::move(fn));
  if (!wake_pending_.exchange(true, std::memory_order_acq_rel)) {
    uint64_t one = 1;
    ssize_t w = ::write(event_fd_.get(), &one, sizeof one);
    (void)w;  // EAGAIN means the counter is already non-zero: the loop will wake
  }
}

void Loop::request_stop() {
  stop_.store(true, std::memory_order_release);
  post([] {});
}

void Loop::run(const std::function<bool()>& may_quit) {
  while (!(stop_requested() && (!may_quit || may_quit()))) run_once();
}

void Loop::run_once() {
  {
    if (!timers_.empty() && !tick_armed_) arm_tick();
    io_uring_submit_and_wait(&ring_, 1);
    now_ms_ = clock_();
    io_uring_cqe* cqe;
    unsigned head;
    unsigned n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++n;
      uint64_t ud = cqe->user_data;
      if (ud == 0) continue;
      completion_of(ud)->complete(tag_of(ud), cqe->res, cqe->flags);
    }
    io_uring_cq_advance(&ring_, n);
    timers_.advance(now_ms_);
  }
}

void Loop::give_back(uint16_t bid) {
  buffers_->give_back(bid);
  if (BufferWaiter* w = waiters_.pop_front()) w->on_buffer_available();
}

void Loop::wait_for_buffer(BufferWaiter& w) {
  if (!w.waiting()) waiters_.push_back(w);
}

void Loop::stop_waiting(BufferWaiter& w) { w.unlink(); }

}  // namespace kib::uring
