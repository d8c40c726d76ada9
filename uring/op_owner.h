#pragma once
// The one lifecycle of an object that owns in-flight io_uring operations (Seastar's
// completion objects; liburing's proxy example and Envoy's worker for the close):
//   - start_op(tag) hands out an SQE whose user_data already names (this, tag); prep
//     helpers leave user_data alone, so nothing sets it again. The operation is in
//     flight until its last CQE (a multishot one: until a CQE without F_MORE).
//   - hold(tag)/unhold(tag): something that is not an SQE (a resolver's callback)
//     that must also finish before release.
//   - close_ops(): cancel every in-flight operation, then wait for each one's own CQE.
//   - on_released(): the one hook, called once, when closing and nothing is in flight;
//     the owner frees its buffers and sockets (or itself) there.
// A CQE is handed to on_complete() with its bit already cleared; a release that
// becomes due inside it runs after it returns, so a handler never runs on a freed
// owner.
#include <liburing.h>

#include <cstdint>

#include "uring/completion.h"

namespace kib::uring {

class Loop;

class OpOwner : private Completion {
 public:
  OpOwner(const OpOwner&) = delete;
  OpOwner& operator=(const OpOwner&) = delete;

  bool closing() const { return closing_; }

 protected:
  explicit OpOwner(Loop& loop) : loop_(loop) {}
  ~OpOwner() = default;

  // An SQE for operation `tag` (0..7), user_data set: fill it with a prep helper, then
  // set flags (the helpers clear them). Started after close_ops(), it is cancelled at
  // once so that release still comes.
  io_uring_sqe* start_op(unsigned tag);
  // Cancels one operation (its CQE still comes, usually -ECANCELED), without closing.
  void cancel_op(unsigned tag);
  bool in_flight(unsigned tag) const { return ((inflight_ | held_) >> tag) & 1u; }
  bool any_in_flight() const { return (inflight_ | held_) != 0; }
  void hold(unsigned tag) { held_ |= 1u << tag; }
  // May release (and so free) the owner: touch nothing after it.
  void unhold(unsigned tag);
  // Idempotent. May release at once (nothing in flight): touch nothing after it.
  void close_ops();

  virtual void on_complete(unsigned tag, int32_t res, uint32_t flags) = 0;
  virtual void on_released() = 0;

  Loop& loop_;

 private:
  void complete(unsigned tag, int32_t res, uint32_t flags) final;
  void maybe_release();

  uint16_t inflight_ = 0;  // SQE operations, by tag
  uint16_t held_ = 0;      // other pending events, by tag
  uint8_t dispatching_ = 0;
  bool closing_ = false;
  bool released_ = false;
};

}  // namespace kib::uring
