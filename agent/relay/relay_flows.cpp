// The relaying half of RelayConnection: two flows, guest -> Egress (flow_[kGuest]) and
// Egress -> guest (flow_[kUp]). Each is a recv from its source into a provided
// buffer, at most one send in flight to its destination, then the source's FIN passed
// on. Plain, a flow sends from the very buffer it received into (and splices once
// bulk: relay_splice.cpp). Inside TLS the session stands between the flows, and the
// relay meets it at three points only: what comes in (tls_take_in), what goes out
// when a flow is empty (tls_refill) and the end of a source (tls_end).
#include <sys/socket.h>

#include <cerrno>

#include "agent/relay/relay_connection.h"

namespace kib::relay {

void RelayConnection::arm_recv(int side) {
  unsigned tag = recv_tag(side);
  if (in_flight(tag) || phase_ == Phase::closing) return;
  if (flow_[side].pipe) return splice_flow(side);
  io_uring_sqe* s = start_op(tag);
  io_uring_prep_recv(s, -1, nullptr, loop_.buffers().buffer_size(), 0);
  socket(side).aim(s);
  s->flags |= IOSQE_BUFFER_SELECT;
  s->buf_group = loop_.buffers().group_id();
}

void RelayConnection::on_recv(int side, int32_t res, uint32_t flags) {
  int32_t bid = -1;
  if (flags & IORING_CQE_F_BUFFER) {
    bid = static_cast<int32_t>(flags >> IORING_CQE_BUFFER_SHIFT);
    loop_.buffers().note_picked();
  }
  if (phase_ == Phase::closing) {
    if (bid >= 0) loop_.give_back(static_cast<uint16_t>(bid));
    return;
  }
  if (res == -ENOBUFS) {
    // The ring ran dry in a burst: re-arm once it was topped up, else wait for a
    // buffer to come back.
    if (loop_.buffers().posted() > 0) return arm_recv(side);
    flow_[side].need_buffer = true;
    loop_.wait_for_buffer(*this);
    return;
  }
  if (res < 0) {
    if (phase_ != Phase::relaying) return advance(dial_->on_io_error("recv", -res));
    return close(true, side == kGuest ? CloseReason::guest_reset : CloseReason::upstream_reset);
  }
  last_activity_ = loop_.now_ms();
  if (res == 0) {
    if (phase_ != Phase::relaying) {
      if (side == kUp) return advance(dial_->on_closed());
      return close(true, CloseReason::guest_reset);
    }
    return handle_eof(side);
  }
  uint8_t* data = loop_.buffers().data(static_cast<uint16_t>(bid));
  const auto len = static_cast<uint32_t>(res);
  if (phase_ != Phase::relaying) return on_dial_bytes(data, len, bid);
  // More bytes or the FIN already wait on the source: send with MSG_MORE so the next
  // send, or the shutdown, fills the same segment (a reply and its FIN go as one
  // packet). The next recv completes at once, so nothing stays corked for long.
  take_in(side, data, len, bid, (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0);
}

// Bytes received from `side` while relaying, in provided buffer bid.
void RelayConnection::take_in(int side, uint8_t* data, uint32_t len, int32_t bid, bool more) {
  if (side == kGuest) count(kGuest, len);
  if (tls_) return tls_take_in(side, data, len, bid);
  Flow& f = flow_[side];
  f.bid = bid;
  f.data = data;
  f.off = 0;
  f.len = len;
  f.more = more;
  maybe_start_splice(side, len);
  pump(side);
}

void RelayConnection::on_send(int to, int32_t res) {
  if (phase_ == Phase::closing) return;
  if (res < 0) {
    if (phase_ != Phase::relaying) return advance(dial_->on_io_error("send", -res));
    return close(true, to == kGuest ? CloseReason::guest_reset : CloseReason::upstream_reset);
  }
  if (to == kGuest) count(kUp, static_cast<uint64_t>(res));
  const int from = other(to);
  Flow& f = flow_[from];
  f.off += static_cast<uint32_t>(res);
  f.len -= static_cast<uint32_t>(res);
  if (f.tls_out) tls_->consume_out(static_cast<size_t>(res));
  if (f.len == 0) release_flow_buffer(f);
  pump(from);
}

// Sends a flow's pending bytes to the other side; once none are left, passes on the
// source's FIN or reads from the source again (one send in flight at most: a slow
// destination stops reads from its source). While dialing, only the guest's flow
// moves: it carries the dial's requests to the Egress.
void RelayConnection::pump(int from) {
  const int to = other(from);
  if (in_flight(send_tag(to)) || phase_ == Phase::closing) return;
  if (from == kUp && phase_ != Phase::relaying) return;
  Flow& f = flow_[from];
  if (f.len == 0 && !refill(from)) return;
  if (f.len > 0) return submit_send(to, f.data + f.off, f.len, f.more);
  release_flow_buffer(f);
  if (phase_ != Phase::relaying) return;
  if (f.eof) {
    if (!f.shut) {
      pass_fin(to);
      f.shut = true;
    }
    return maybe_finish();
  }
  if (!f.need_buffer) arm_recv(from);
}

// Bytes for an empty flow that are made here rather than received: the dial's
// requests to the Egress (ciphertext inside TLS), and all that TLS yields. They go
// out by a send SQE from a pool buffer: the upstream socket may have no fd to send()
// on. false: the connection is closing.
bool RelayConnection::refill(int from) {
  if (from == kGuest && dial_ && dial_->pending_out() > 0) {
    if (!take_pool_buffer(flow_[kGuest])) {
      dial_failed(DialCause::local, "out of memory");
      return false;
    }
    flow_[kGuest].len = static_cast<uint32_t>(dial_->take_out(flow_[kGuest].pooled, loop_.pool().buffer_size()));
    return true;
  }
  return tls_ ? tls_refill(from) : true;
}

bool RelayConnection::take_pool_buffer(Flow& f) {
  if (f.pooled == nullptr) f.pooled = loop_.pool().take();
  if (f.pooled == nullptr) return false;
  f.data = f.pooled;
  f.off = 0;
  return true;
}

// The FIN toward `to`: the destination of a flow whose source ended.
void RelayConnection::pass_fin(int to) {
  if (to == kUp) return shutdown_up();
  ::shutdown(guest_.fd(), SHUT_WR);
}

void RelayConnection::handle_eof(int side) {
  if (first_eof_ < 0) first_eof_ = side;
  if (tls_)
    tls_end(side);
  else
    flow_[side].eof = true;
  pump(side);
}

void RelayConnection::maybe_finish() {
  if (flow_[kGuest].shut && flow_[kUp].shut)
    close(false, first_eof_ == kUp ? CloseReason::upstream_closed : CloseReason::guest_closed);
}

// Plaintext from the guest is sealed into the session, ciphertext from the Egress
// opened by it where it landed: the flow toward the guest is empty whenever a recv
// from the Egress completes (one is armed only then), so pump() reads the records
// from the provided buffer before it goes back; the session copies what is left. A
// close inside pump() releases this only after the CQE's handler returned.
void RelayConnection::tls_take_in(int side, const uint8_t* data, uint32_t len, int32_t bid) {
  bool ok = true;
  if (side == kUp)
    tls_->lend(data, len);
  else
    ok = tls_->write(data, len) == TlsSession::Io::ok;
  if (ok) {
    if (!tls_release_due_) {
      tls_release_due_ = true;
      rearm_timer();
    }
    pump(side);
  }
  if (side == kUp) tls_->end_loan();
  loop_.give_back(static_cast<uint16_t>(bid));
  if (!ok) close(true, CloseReason::upstream_reset);
}

// Toward the Egress: the session's ciphertext. Toward the guest: the next plaintext
// record, until the Egress's close_notify ends the flow.
bool RelayConnection::tls_refill(int from) {
  Flow& f = flow_[from];
  if (from == kGuest) {  // sent from the session's buffer in place (on_send consumes it)
    if (tls_->pending_out() == 0) return true;
    const std::span<uint8_t> out = tls_->next_out();
    f.data = out.data();
    f.off = 0;
    f.len = static_cast<uint32_t>(out.size());
    f.tls_out = true;
    return true;
  }
  if (f.eof) return true;
  const size_t cap = loop_.pool().buffer_size();
  if (!take_pool_buffer(f)) return reset(CloseReason::relay_error);
  size_t n = 0;
  const TlsSession::Io io = tls_->read(f.pooled, cap, &n);
  pump(kGuest);  // reading may have queued protocol bytes (key update, alerts)
  if (phase_ == Phase::closing) return false;
  switch (io) {
    case TlsSession::Io::ok: f.len = static_cast<uint32_t>(n); return true;
    case TlsSession::Io::closed:  // close_notify: the Egress's end, with or without its FIN
      f.eof = true;
      if (first_eof_ < 0) first_eof_ = kUp;
      return true;
    case TlsSession::Io::want_read:
      if (!up_fin_) return true;
      return reset(CloseReason::upstream_reset);  // the Egress's stream ended inside a record: cut short
    case TlsSession::Io::error: return reset(CloseReason::upstream_reset);
  }
  return true;
}

bool RelayConnection::reset(CloseReason why) {
  close(true, why);
  return false;
}

// The Egress's FIN: the session reads the records before it, then reports the end
// (only after close_notify; without one the data may be cut short). The guest's:
// close_notify goes out before our FIN.
void RelayConnection::tls_end(int side) {
  if (side == kUp) {
    up_fin_ = true;
    return tls_->feed_eof();
  }
  flow_[kGuest].eof = true;
  tls_->shutdown();
}

void RelayConnection::on_buffer_available() {
  for (int side : {kGuest, kUp}) {
    if (!flow_[side].need_buffer) continue;
    flow_[side].need_buffer = false;
    arm_recv(side);
  }
}

void RelayConnection::submit_send(int side, const uint8_t* data, uint32_t len, bool more) {
  io_uring_sqe* s = start_op(send_tag(side));
  io_uring_prep_send(s, -1, data, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
  socket(side).aim(s);
}

void RelayConnection::release_flow_buffer(Flow& f) {
  if (f.bid >= 0) loop_.give_back(static_cast<uint16_t>(f.bid));
  if (f.pooled != nullptr) loop_.pool().give_back(f.pooled);
  f.moved.reset();
  f.bid = -1;
  f.pooled = nullptr;
  f.data = nullptr;
  f.off = f.len = 0;
  f.more = false;
  f.tls_out = false;
}

}  // namespace kib::relay
