#pragma once
// One event loop = one io_uring, owned and driven by one thread. Every operation is
// submitted with encode_user_data(owner, tag); the loop calls owner->complete() for
// its CQE. Other threads reach the loop only through post().
#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "uring/buffer_pool.h"
#include "uring/buffer_ring.h"
#include "uring/completion.h"
#include "uring/file_slots.h"
#include "uring/intrusive_list.h"
#include "uring/timer_wheel.h"

namespace kib::uring {

struct LoopOptions {
  uint32_t sq_entries = 1024;  // the CQ has twice as many; SQEs are submitted when full
  // Provided buffers, shared by all sockets of the loop. 64 KiB halves the relay's
  // CPU per GB against 16 KiB (fewer, larger sends); only `buffers_posted` of them
  // sit in the ring, so the resident set follows the traffic, not the pool size.
  uint32_t buffer_count = 256;
  uint32_t buffer_size = 65536;
  uint32_t buffers_posted = 32;
  // Direct-descriptor slots (FileSlots) for sockets the loop opens itself; 0: plain
  // fds only. At most RLIMIT_NOFILE's soft limit (else the loop gets none).
  uint32_t file_slots = 0;
  // Monotonic milliseconds; empty: CLOCK_MONOTONIC. Tests pass a clock they step, so
  // that timers (idle, drain, handshake) fire without waiting for them in real time.
  std::function<uint64_t()> clock;
};

// Something waiting for a provided buffer after a recv failed with ENOBUFS.
class BufferWaiter : public ListNode<BufferWaiter> {
 public:
  virtual void on_buffer_available() = 0;
  bool waiting() const { return linked(); }

 protected:
  ~BufferWaiter() = default;
};

class Loop final : private Completion {
 public:
  // Must be called on the thread that will run the loop (single-issuer ring).
  static Result<std::unique_ptr<Loop>> create(const LoopOptions& opts);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // An SQE to fill, its user_data already encode_user_data(owner, tag) (owner null:
  // 0, a CQE nobody reads); submits pending ones when the SQ is full. Never null.
  // liburing's prep helpers leave user_data alone (they clear flags: set those after).
  io_uring_sqe* sqe(Completion* owner, unsigned tag);
  // Cancels every in-flight operation of owner with that tag (its CQE still comes).
  void cancel(Completion* owner, unsigned tag);

  // Runs until stop_requested() and the quit predicate (if any) is true.
  void run(const std::function<bool()>& may_quit = {});
  // Waits for at least one completion and dispatches every ready one.
  void run_once();
  // Thread-safe: runs fn on the loop thread.
  void post(std::function<void()> fn);
  // Thread-safe.
  void request_stop();
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }

  // The loop's clock (LoopOptions::clock), read once per run_once().
  uint64_t now_ms() const { return now_ms_; }
  static uint64_t monotonic_ms();
  TimerWheel& timers() { return timers_; }
  BufferRing& buffers() { return *buffers_; }
  BufferPool& pool() { return pool_; }
  FileSlots& slots() { return slots_; }
  // Closes the socket in slot (reset: with an RST, SO_LINGER 0) by SQEs that run
  // ahead of any later reuse of the slot, and frees the slot.
  void close_slot(int slot, bool reset);
  // Returns a provided buffer to the kernel and wakes one waiter.
  void give_back(uint16_t bid);
  void wait_for_buffer(BufferWaiter& w);
  void stop_waiting(BufferWaiter& w);

 private:
  enum Tag : unsigned { kWakeTag = 1, kTickTag = 2 };
  explicit Loop(std::function<uint64_t()> clock);
  void complete(unsigned tag, int32_t res, uint32_t flags) override;
  void arm_wakeup();
  void arm_tick();
  void run_posted();

  io_uring ring_{};
  bool ring_ok_ = false;
  UniqueFd event_fd_;
  uint64_t event_value_ = 0;
  std::unique_ptr<BufferRing> buffers_;
  FileSlots slots_;
  BufferPool pool_{16384 + 512};
  std::function<uint64_t()> clock_;
  uint64_t now_ms_;
  TimerWheel timers_;
  bool tick_armed_ = false;
  __kernel_timespec tick_ts_{};
  std::atomic<bool> stop_{false};
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  std::atomic<bool> wake_pending_{false};
  IntrusiveList<BufferWaiter> waiters_;
};

}  // namespace kib::uring
