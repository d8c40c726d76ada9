#include "uring/op_owner.h"

#include "uring/loop.h"

namespace kib::uring {

io_uring_sqe* OpOwner::start_op(unsigned tag) {
  io_uring_sqe* s = loop_.sqe(this, tag);
  inflight_ = static_cast<uint16_t>(inflight_ | (1u << tag));
  // Nothing else would ever end it: the owner would never be released.
  if (closing_) loop_.cancel(this, tag);
  return s;
}

void OpOwner::cancel_op(unsigned tag) {
  if ((inflight_ >> tag) & 1u) loop_.cancel(this, tag);
}

void OpOwner::unhold(unsigned tag) {
  held_ = static_cast<uint16_t>(held_ & ~(1u << tag));
  maybe_release();
}

void OpOwner::close_ops() {
  if (closing_) return;
  closing_ = true;
  for (unsigned tag = 0; tag <= kTagMask; ++tag)
    if ((inflight_ >> tag) & 1u) loop_.cancel(this, tag);
  maybe_release();
}

void OpOwner::complete(unsigned tag, int32_t res, uint32_t flags) {
  if (!(flags & IORING_CQE_F_MORE)) inflight_ = static_cast<uint16_t>(inflight_ & ~(1u << tag));
  ++dispatching_;
  on_complete(tag, res, flags);
  --dispatching_;
  maybe_release();
}

void OpOwner::maybe_release() {
  if (!closing_ || released_ || dispatching_ != 0 || inflight_ != 0 || held_ != 0) return;
  released_ = true;
  on_released();  // may free this
}

}  // namespace kib::uring
