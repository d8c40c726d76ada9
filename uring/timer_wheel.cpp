#include "uring/timer_wheel.h"

namespace kib::uring {

namespace {
// Each Timer must reach its wheel to update the count on cancel; timers never move
// between loops, so one thread-local pointer suffices.
thread_local TimerWheel* t_wheel = nullptr;
}  // namespace

void Timer::cancel() {
  if (armed() && t_wheel != nullptr) t_wheel->unlink(*this);
}

TimerWheel::TimerWheel(uint64_t now_ms) : current_tick_(now_ms / kTickMs) {
  heads_ = std::make_unique<Timer[]>(kSlots);
  for (size_t i = 0; i < kSlots; ++i) {
    heads_[i].prev_ = &heads_[i];
    heads_[i].next_ = &heads_[i];
  }
  t_wheel = this;
}

TimerWheel::~TimerWheel() {
  for (size_t i = 0; i < kSlots; ++i) {
    Timer& h = heads_[i];
    while (h.next_ != &h) unlink(*h.next_);
    h.prev_ = h.next_ = nullptr;
  }
  if (t_wheel == this) t_wheel = nullptr;
}

void TimerWheel::unlink(Timer& t) {
  t.prev_->next_ = t.next_;
  t.next_->prev_ = t.prev_;
  t.prev_ = t.next_ = nullptr;
  --count_;
}

void TimerWheel::arm(Timer& t, uint64_t deadline_ms) {
  if (t.armed()) unlink(t);
  t.deadline_ms_ = deadline_ms;
  uint64_t tick = (deadline_ms + kTickMs - 1) / kTickMs;
  if (tick <= current_tick_) tick = current_tick_ + 1;
  Timer& head = heads_[tick % kSlots];
  t.next_ = head.next_;
  t.prev_ = &head;
  head.next_->prev_ = &t;
  head.next_ = &t;
  ++count_;
}

void TimerWheel::advance(uint64_t now_ms) {
  uint64_t target = now_ms / kTickMs;
  // Visit at most one full turn: beyond that every slot has been seen once.
  if (target > current_tick_ + kSlots) current_tick_ = target - kSlots;
  while (current_tick_ < target) {
    ++current_tick_;
    Timer& head = heads_[current_tick_ % kSlots];
    // Detach the due ones first so handlers can re-arm into this same slot safely.
    Timer due(nullptr);
    due.prev_ = due.next_ = &due;
    for (Timer* t = head.next_; t != &head;) {
      Timer* next = t->next_;
      if (t->deadline_ms_ <= now_ms) {
        t->prev_->next_ = t->next_;
        t->next_->prev_ = t->prev_;
        t->next_ = due.next_;
        t->prev_ = &due;
        due.next_->prev_ = t;
        due.next_ = t;
      }
      t = next;
    }
    while (due.next_ != &due) {
      Timer* t = due.next_;
      unlink(*t);
      t->handler_->on_timer(*t);
    }
    due.prev_ = due.next_ = nullptr;
  }
}

}  // namespace kib::uring
