#include "uring/timer_wheel.h"

namespace kib::uring {

void Timer::cancel() {
  if (armed()) wheel_->unlink(*this);
}

TimerWheel::TimerWheel(uint64_t now_ms)
    : slots_(std::make_unique<IntrusiveList<Timer>[]>(kSlots)), current_tick_(now_ms / kTickMs) {}

TimerWheel::~TimerWheel() {
  for (size_t i = 0; i < kSlots; ++i) slots_[i].clear();
}

void TimerWheel::unlink(Timer& t) {
  t.unlink();
  t.wheel_ = nullptr;
  --count_;
}

void TimerWheel::arm(Timer& t, uint64_t deadline_ms) {
  if (t.armed()) t.cancel();
  t.deadline_ms_ = deadline_ms;
  uint64_t tick = (deadline_ms + kTickMs - 1) / kTickMs;
  if (tick <= current_tick_) tick = current_tick_ + 1;
  slots_[tick % kSlots].push_front(t);
  t.wheel_ = this;
  ++count_;
}

void TimerWheel::advance(uint64_t now_ms) {
  uint64_t target = now_ms / kTickMs;
  // Visit at most one full turn: beyond that every slot has been seen once.
  if (target > current_tick_ + kSlots) current_tick_ = target - kSlots;
  while (current_tick_ < target) {
    ++current_tick_;
    // Detach the due ones first so handlers can re-arm into this same slot safely.
    IntrusiveList<Timer> due;
    slots_[current_tick_ % kSlots].for_each([&](Timer& t) {
      if (t.deadline_ms_ > now_ms) return;
      t.unlink();
      due.push_back(t);
    });
    while (Timer* t = due.pop_front()) {
      t->wheel_ = nullptr;
      --count_;
      t->handler_->on_timer(*t);
    }
  }
}

}  // namespace kib::uring
