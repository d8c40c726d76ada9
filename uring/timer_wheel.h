#pragma once
// A hashed timer wheel: O(1) arm and cancel, intrusive nodes (no allocation per
// timer), one IORING_OP_TIMEOUT per loop for the next tick. Deadlines are rounded up
// to the tick; connection timers (connect, handshake, idle, drain) do not need more.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "uring/intrusive_list.h"

namespace kib::uring {

class Timer;
class TimerWheel;

class TimerHandler {
 public:
  virtual void on_timer(Timer& t) = 0;

 protected:
  ~TimerHandler() = default;
};

// Embedded in its owner. Destroying an armed Timer unlinks it.
class Timer : public ListNode<Timer> {
 public:
  explicit Timer(TimerHandler* h = nullptr) : handler_(h) {}
  ~Timer() { cancel(); }

  bool armed() const { return linked(); }
  uint64_t deadline_ms() const { return deadline_ms_; }
  void cancel();

 private:
  friend class TimerWheel;
  TimerHandler* handler_;
  TimerWheel* wheel_ = nullptr;  // while armed
  uint64_t deadline_ms_ = 0;
};

class TimerWheel {
 public:
  static constexpr uint64_t kTickMs = 50;
  static constexpr size_t kSlots = 1024;

  explicit TimerWheel(uint64_t now_ms);
  ~TimerWheel();

  // (Re)arms t to fire at deadline_ms (absolute, monotonic milliseconds).
  void arm(Timer& t, uint64_t deadline_ms);
  // Fires every timer whose deadline is <= now_ms. Handlers may arm or cancel timers.
  void advance(uint64_t now_ms);
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }

 private:
  friend class Timer;
  void unlink(Timer& t);
  std::unique_ptr<IntrusiveList<Timer>[]> slots_;
  uint64_t current_tick_;
  size_t count_ = 0;
};

}  // namespace kib::uring
