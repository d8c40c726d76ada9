// Take-over of a plain relay (moved_relay.h): move_out stops it where it stands and
// hands its sockets and unsent bytes on; resume, in the next process, relays on from
// there. Every operation in flight is cancelled and its own CQE read before anything
// is handed on, so each byte is either in a flow, in a pipe or already sent, once.
#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "agent/relay/relay_connection.h"
#include "uring/socket_ops.h"

namespace kib::relay {

void RelayConnection::move_out() {
  if (!movable()) return;
  phase_ = Phase::moving;
  timer_.cancel();
  loop_.stop_waiting(*this);
  // A shutdown or fd install runs to its end (io-wq, fast); the rest are waits.
  for (unsigned tag : {kGuestRecv, kGuestSend, kUpRecv, kUpSend})
    if (in_flight(tag)) cancel_op(tag);
  if (!any_in_flight()) finish_move();
}

// A CQE while moving: what it did is kept (bytes received go into the flow, bytes
// sent leave it); nothing new starts except the upstream socket's plain fd.
void RelayConnection::on_move_complete(unsigned tag, int32_t res, uint32_t flags) {
  const bool failed = res < 0 && res != -ECANCELED && res != -ETIME && res != -ENOBUFS;
  switch (tag) {
    case kGuestRecv:
    case kUpRecv: {
      const int side = tag == kGuestRecv ? kGuest : kUp;
      Flow& f = flow_[side];
      if (flags & IORING_CQE_F_BUFFER) {  // a recv, never a splicing flow's wait
        const auto bid = static_cast<uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
        loop_.buffers().note_picked();
        if (res > 0) {  // armed only on an empty flow
          f.bid = bid;
          f.data = loop_.buffers().data(bid);
          f.off = 0;
          f.len = static_cast<uint32_t>(res);
        } else {
          loop_.give_back(bid);
        }
      }
      if (res == 0 && !f.pipe) f.eof = true;
      move_failed_ |= failed;
      break;
    }
    case kGuestSend:
    case kUpSend: {
      Flow& f = flow_[other(tag == kGuestSend ? kGuest : kUp)];
      if (std::exchange(f.out_poll, false)) break;  // a splicing flow's POLLOUT wait
      if (res > 0) {
        f.off += static_cast<uint32_t>(res);
        f.len -= static_cast<uint32_t>(res);
      }
      move_failed_ |= failed;
      break;
    }
    case kInstall:
      if (res >= 0) up_.set_fd(UniqueFd(res));
      if (std::exchange(shutdown_on_fd_, false) && up_.fd() >= 0) ::shutdown(up_.fd(), SHUT_WR);
      break;
    default: break;
  }
  if (!any_in_flight()) finish_move();
}

void RelayConnection::finish_move() {
  // A connection that cannot travel is reset by the agent.
  if (move_failed_) return close(true, CloseReason::agent_closed);
  if (up_.fd() < 0) {
    // A slot's socket: it needs a plain fd to travel. Asked once; none to be had:
    // the connection resets.
    if (asked_plain_fd_) return close(true, CloseReason::agent_closed);
    asked_plain_fd_ = true;
    uring::prep_fixed_fd_install(start_op(kInstall), up_.slot());
    return;
  }
  MovedRelay m;
  m.flow[kGuest] = take_moved_flow(kGuest);
  m.flow[kUp] = take_moved_flow(kUp);
  m.guest = guest_.take_fd();
  m.up = up_.take_fd();
  m.egress_id = target_->egress_id();
  m.revision = target_->revision_number();
  const uint64_t now = loop_.now_ms();
  m.idle_ms = now - last_activity_;
  if (drain_deadline_ != 0) m.drain_left_ms = drain_deadline_ > now ? drain_deadline_ - now : 1;
  obs_.on_moved(*this, std::move(m));
  phase_ = Phase::relaying;  // close() from here: the handles hold no socket any more
  close(false, CloseReason::handed_over);
}

MovedFlow RelayConnection::take_moved_flow(int side) {
  Flow& f = flow_[side];
  MovedFlow m;
  m.pending.assign(reinterpret_cast<const char*>(f.data + f.off), f.len);
  m.eof = f.eof;
  m.shut = f.shut;
  if (f.pipe) {
    set_receive_lowat(side, 0);  // the next process starts its waits afresh
    f.pipe->release(&m.pipe_r, &m.pipe_w);
    f.pipe.reset();
  }
  release_flow_buffer(f);
  return m;
}

void RelayConnection::resume(MovedRelay moved) {
  const uint64_t now = loop_.now_ms();
  if (moved.drain_left_ms != 0) drain_deadline_ = now + moved.drain_left_ms;  // first: the owner counts it draining
  up_ = uring::SocketHandle(std::move(moved.up));
  asked_plain_fd_ = true;
  const int fl = fcntl(up_.fd(), F_GETFL);
  nonblocking_ = fl >= 0 && (fl & O_NONBLOCK) != 0 && (fcntl(guest_.fd(), F_GETFL) & O_NONBLOCK) != 0;
  // A pipe that cannot be taken up would lose its bytes: reset rather.
  if (!resume_flow(kGuest, std::move(moved.flow[kGuest])) || !resume_flow(kUp, std::move(moved.flow[kUp])))
    return close(true, CloseReason::relay_error);
  if ((flow_[kGuest].pipe || flow_[kUp].pipe) && !nonblocking_) {
    if (!set_nonblocking(guest_.fd()) || !set_nonblocking(up_.fd())) return close(true, CloseReason::relay_error);
    nonblocking_ = true;
  }
  phase_ = Phase::relaying;
  first_byte_seen_ = true;  // timed by the process that dialed it
  last_activity_ = now > moved.idle_ms ? now - moved.idle_ms : 0;
  rearm_timer();
  obs_.on_established(*this);
  // Held across both pumps: the first may end the connection, and no CQE handler
  // defers its release here.
  hold(kResolve);
  pump(kUp);
  pump(kGuest);
  unhold(kResolve);  // may release: nothing after it
}

bool RelayConnection::resume_flow(int side, MovedFlow&& m) {
  Flow& f = flow_[side];
  f.eof = m.eof;
  f.shut = m.shut;
  if (m.eof && first_eof_ < 0) first_eof_ = side;
  if (!m.pending.empty()) {
    f.moved = std::make_unique<uint8_t[]>(m.pending.size());
    std::memcpy(f.moved.get(), m.pending.data(), m.pending.size());
    f.data = f.moved.get();
    f.len = static_cast<uint32_t>(m.pending.size());
  }
  if (!m.pipe_r && !m.pipe_w) return true;
  if (m.pipe_r && m.pipe_w) f.pipe = SplicePipe::adopt(std::move(m.pipe_r), std::move(m.pipe_w));
  return f.pipe != nullptr;
}

}  // namespace kib::relay
