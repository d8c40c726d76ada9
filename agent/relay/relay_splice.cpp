// Bulk flows of a plain relay: once a recv fills a whole buffer, the flow's bytes move
// by splice(2) through a pipe, socket to socket, without a copy through user space, and
// a source slower than the relay gets its bytes gathered before each wake-up
// (gather_wait.h).
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "agent/relay/gather_wait.h"
#include "agent/relay/relay_connection.h"

namespace kib::relay {

// A recv that filled a whole buffer means more is queued: the flow is bulk, and
// splice moves it from now on (plain only: TLS needs the bytes, and never gets here).
// No pipe to be had (descriptors, memory): it keeps copying.
void RelayConnection::maybe_start_splice(int side, uint32_t received) {
  Flow& f = flow_[side];
  if (f.pipe || received < loop_.buffers().buffer_size()) return;
  if (up_.fd() < 0) return ask_plain_fd();
  if (!nonblocking_) {
    if (!set_nonblocking(guest_.fd()) || !set_nonblocking(up_.fd())) return;
    nonblocking_ = true;
  }
  f.pipe = SplicePipe::open();
}

// Moves a splicing flow's bytes until its source is empty, its destination full, the
// budget used (fairness between the loop's connections) or the source's EOF.
void RelayConnection::splice_flow(int side) {
  constexpr size_t kBudget = 1u << 20;
  const int other = side == kGuest ? kUp : kGuest;
  Flow& f = flow_[side];
  if (phase_ == Phase::closing || in_flight(recv_tag(side)) || in_flight(send_tag(other))) return;
  size_t moved = 0;
  int err = 0;
  SplicePipe::Step step = f.pipe->pump(fd(side), fd(other), kBudget, &moved, &err, coalescing());
  if (moved > 0) {
    last_activity_ = loop_.now_ms();
    count(side, moved);
  }
  f.pipe->gather().gathered += moved;
  switch (step) {
    case SplicePipe::Step::src_empty:
      // Bytes came and the source is dry (a read found nothing more, or took less
      // than half the pipe): it is slower than the relay, so let the next ones
      // gather before the next wake-up. Nothing came: wait for it.
      if (moved > 0 && coalescing()) return arm_coalesce(side);
      set_receive_lowat(side, 0);
      f.pipe->gather() = {};
      return arm_poll(side, recv_tag(side), POLLIN);
    case SplicePipe::Step::yielded: set_receive_lowat(side, 0); return arm_poll(side, recv_tag(side), POLLIN);
    case SplicePipe::Step::dst_full: f.out_poll = true; return arm_poll(other, send_tag(other), POLLOUT);
    case SplicePipe::Step::eof: return handle_eof(side);
    case SplicePipe::Step::error: return close_on_error();
  }
}

// What the source's receive buffer holds (its sk_rcvbuf; 0: unknown).
static uint64_t receive_buffer(int fd) {
  int bytes = 0;
  socklen_t len = sizeof bytes;
  return getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, &len) == 0 && bytes > 0 ? static_cast<uint64_t>(bytes) : 0;
}

// A timeout in place of the POLLIN wait: see RelayTimeouts::splice_coalesce_us. Its
// -ETIME completion reads as "readable": the flow pumps whatever arrived meanwhile.
void RelayConnection::arm_coalesce(int side) {
  GatherState& g = flow_[side].pipe->gather();
  const uint64_t rcvbuf = receive_buffer(fd(side));
  g.wait_us = next_gather_us(g.wait_us, g.gathered, timeouts_.splice_coalesce_us, rcvbuf);
  set_receive_lowat(side, static_cast<uint32_t>(gather_target(rcvbuf)));
  g.gathered = 0;
  g.ts = {0, static_cast<long long>(g.wait_us) * 1000};
  io_uring_sqe* s = start_op(recv_tag(side));
  io_uring_prep_timeout(s, &g.ts, 0, 0);
}

// While a flow waits on a timer its source's unread bytes grow, and Linux delays the
// ACK of a segment that would shrink the window it advertises: the sender (dante,
// BBR) then sends one window per wait. Below SO_RCVLOWAT the kernel ACKs at once
// (__tcp_ack_snd_check), so the wait's target keeps the sender going; a POLLIN wait
// needs it back at 1 (the kernel's default), or a tail shorter than it would not wake
// the flow. bytes 0: back to 1.
void RelayConnection::set_receive_lowat(int side, uint32_t bytes) {
  GatherState& g = flow_[side].pipe->gather();
  if (g.lowat == bytes) return;
  const int v = bytes == 0 ? 1 : static_cast<int>(bytes);
  if (setsockopt(fd(side), SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) g.lowat = bytes;
}

void RelayConnection::arm_poll(int side, unsigned tag, unsigned mask) {
  io_uring_sqe* s = start_op(tag);
  io_uring_prep_poll_add(s, -1, mask);
  socket(side).aim(s);
}

}  // namespace kib::relay
