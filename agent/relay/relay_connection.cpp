// Over ~400 lines for a reason: this is one connection's whole io_uring life (the
// dial's socket ops, copy, splice with gathering, TLS, half-close, drain, release),
// whose operations share one in-flight mask and one release point. The dial itself is
// egress_dial.cpp; splitting the relaying into per-direction flows is issue 27's next
// step.
#include "agent/relay/relay_connection.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "agent/relay/gather_wait.h"
#include "uring/socket_ops.h"

namespace kib::relay {

namespace {

// Out of descriptors or socket memory: the owner stops accepting for a while.
bool is_out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

}  // namespace

RelayConnection::RelayConnection(uring::Loop& loop, ConnectionObserver& obs, const RelayTimeouts& timeouts,
                                 UniqueFd guest_fd, DialTargetPtr target)
    : uring::OpOwner(loop),
      obs_(obs),
      timeouts_(timeouts),
      target_(std::move(target)),
      timer_(this),
      guest_(std::move(guest_fd)) {}

SocketAddress RelayConnection::original_dst() const {
  // TPROXY keeps the guest's original destination as the accepted socket's address.
  SocketAddress a{};
  socklen_t len = sizeof a;
  if (getsockname(guest_.fd(), &a.sa, &len) != 0) a.sa.sa_family = AF_UNSPEC;
  return a;
}

// The sockets close with their handles (an RST when the close was a reset).
RelayConnection::~RelayConnection() = default;

void RelayConnection::start(const SocketAddress& original_dst) {
  dial_ = std::make_unique<EgressDial>(
      DialPlan{.egress = target_.get(),
               .destination = original_dst,
               .pipelined = target_->socks_pipelining.load(std::memory_order_relaxed),
               .address_policy = &obs_.address_policy()});
  last_activity_ = loop_.now_ms();
  advance(dial_->start());
}

void RelayConnection::on_resolved(Result<std::vector<policy::IpAddress>> addrs) {
  if (phase_ == Phase::closing) return unhold(kResolve);  // may release: nothing after it
  unhold(kResolve);
  advance(dial_->on_resolved(std::move(addrs)));
}

// Carries out the step the dial (egress_dial.h) asks for next.
void RelayConnection::advance(EgressDial::Step step) {
  switch (step) {
    case EgressDial::Step::resolve:
      phase_ = Phase::resolving;
      hold(kResolve);
      return obs_.resolve(*this, dial_->host());
    case EgressDial::Step::connect: return connect_next();
    case EgressDial::Step::exchange:
      pump_to_up();
      return arm_recv(kUp);
    case EgressDial::Step::dialed: return enter_relay();
    case EgressDial::Step::failed: {
      const DialFailure& f = dial_->failure();
      // The revision's later dials wait for each reply.
      if (f.pipelining_unanswered) target_->socks_pipelining.store(false, std::memory_order_relaxed);
      return dial_failed(f.reason, f.refused);
    }
  }
}

void RelayConnection::connect_next() {
  up_.close();
  socket_error_ = 0;
  connect_timed_out_ = false;
  if (!open_upstream()) return;
  phase_ = Phase::connecting;
  phase_deadline_ = loop_.now_ms() + timeouts_.connect_ms;
  rearm_timer();
  io_uring_sqe* s = start_op(kConnect);
  io_uring_prep_connect(s, -1, &dial_->peer().sa, dial_->peer().length());
  up_.aim(s);
}

// Into a direct-descriptor slot when the loop has one free: the socket and its
// TCP_NODELAY are SQEs that run in order, at submit, ahead of the connect (which
// fails with EBADF if the socket could not be made). Else a plain fd.
bool RelayConnection::open_upstream() {
  static const int kOne = 1;
  const int family = dial_->peer().sa.sa_family;
  if (const int slot = loop_.slots().take(); slot >= 0) {
    up_ = uring::SocketHandle::in_slot(loop_, slot);
    io_uring_sqe* s = start_op(kSocket);
    io_uring_prep_socket_direct(s, family, SOCK_STREAM, IPPROTO_TCP, static_cast<unsigned>(slot), 0);
    s = loop_.sqe(nullptr, 0);
    uring::prep_setsockopt_direct(s, slot, IPPROTO_TCP, TCP_NODELAY, &kOne, sizeof kOne);
    s->flags |= IOSQE_CQE_SKIP_SUCCESS;
    return true;
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) {
    const int err = errno;
    if (is_out_of_resources(err)) obs_.on_out_of_resources(err);
    advance(dial_->on_connected(err));
    return false;
  }
  up_ = uring::SocketHandle(UniqueFd(fd));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &kOne, sizeof kOne);
  return true;
}

// A slot's socket has no inline shutdown: IORING_OP_SHUTDOWN always runs in an io-wq
// worker. When the endpoint's FIN was already passed on (it closed first, the common
// case), the close that follows at once sends our FIN; otherwise the slot's socket
// gets a plain fd (an inline op) and shutdown(2) follows on it. Only without one
// (out of fds) does the io-wq op run, tracked so that the slot is neither closed nor
// reused under it.
void RelayConnection::shutdown_up() {
  if (up_.fd() >= 0) {
    ::shutdown(up_.fd(), SHUT_WR);
    return;
  }
  if (flow_[kUp].shut) return;
  if (!asked_plain_fd_ || in_flight(kInstall)) {
    shutdown_on_fd_ = true;
    return ask_plain_fd();
  }
  shutdown_up_in_worker();
}

void RelayConnection::shutdown_up_in_worker() {
  io_uring_sqe* s = start_op(kShutdown);
  io_uring_prep_shutdown(s, up_.slot(), SHUT_WR);
  s->flags |= IOSQE_FIXED_FILE;
}

// Splice works on fds: the slot's socket gets one, once; bytes keep moving by copy
// until it comes (and for good if it cannot, e.g. out of fds).
void RelayConnection::ask_plain_fd() {
  if (asked_plain_fd_ || up_.slot() < 0) return;
  asked_plain_fd_ = true;
  io_uring_sqe* s = start_op(kInstall);
  uring::prep_fixed_fd_install(s, up_.slot());
}

void RelayConnection::on_connected(int32_t res) {
  if (res < 0) {
    // The socket op's own error when it failed (the connect then says EBADF), and a
    // connect our timer cancelled timed out.
    const int err = socket_error_ != 0 ? socket_error_ : connect_timed_out_ ? ETIMEDOUT : -res;
    return advance(dial_->on_connected(err));
  }
  phase_ = Phase::handshake;
  phase_deadline_ = loop_.now_ms() + timeouts_.handshake_ms;
  rearm_timer();
  advance(dial_->on_connected(0));
}

void RelayConnection::enter_relay() {
  phase_ = Phase::relaying;
  tls_ = dial_->take_tls();
  dial_.reset();
  last_activity_ = loop_.now_ms();
  rearm_timer();
  obs_.on_established(*this);
  pump_to_guest();
  pump_to_up();
}

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

// A recv that filled a whole buffer means more is queued: the flow is bulk, and
// splice moves it from now on without copying it through user space (plain only;
// TLS needs the bytes). No pipe to be had (descriptors, memory): it keeps copying.
void RelayConnection::maybe_start_splice(int side, uint32_t received) {
  Flow& f = flow_[side];
  if (f.pipe || tls_ || received < loop_.buffers().buffer_size()) return;
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
  if (moved > 0) last_activity_ = loop_.now_ms();
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
    case SplicePipe::Step::yielded:
      set_receive_lowat(side, 0);
      return arm_poll(side, recv_tag(side), POLLIN);
    case SplicePipe::Step::dst_full:
      f.out_poll = true;
      return arm_poll(other, send_tag(other), POLLOUT);
    case SplicePipe::Step::eof: return handle_eof(side);
    case SplicePipe::Step::error: return close(true);
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

void RelayConnection::submit_send(int side, const uint8_t* data, uint32_t len, bool more) {
  unsigned tag = send_tag(side);
  io_uring_sqe* s = start_op(tag);
  io_uring_prep_send(s, -1, data, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
  socket(side).aim(s);
}

void RelayConnection::release_flow_buffer(Flow& f) {
  if (f.bid >= 0) loop_.give_back(static_cast<uint16_t>(f.bid));
  if (f.pooled != nullptr) loop_.pool().give_back(f.pooled);
  f.bid = -1;
  f.pooled = nullptr;
  f.data = nullptr;
  f.off = f.len = 0;
  f.more = false;
}

// The operation's bit is clear already; while closing, OpOwner releases after the
// last CQE.
void RelayConnection::on_complete(unsigned tag, int32_t res, uint32_t flags) {
  // A splicing flow's waits: POLLIN on its source (recv tag), POLLOUT on its
  // destination (the destination's send tag).
  auto splice_ready = [&](int side) {
    if (phase_ == Phase::closing) return;
    if (res < 0 && res != -ETIME) return close(true);  // -ETIME: a coalescing wait ended
    splice_flow(side);
  };
  switch (tag) {
    case kGuestRecv: return flow_[kGuest].pipe ? splice_ready(kGuest) : on_recv(kGuest, res, flags);
    case kUpRecv: return flow_[kUp].pipe ? splice_ready(kUp) : on_recv(kUp, res, flags);
    case kGuestSend:
      if (std::exchange(flow_[kUp].out_poll, false)) return splice_ready(kUp);
      return on_send(kGuest, res);
    case kUpSend:
      if (std::exchange(flow_[kGuest].out_poll, false)) return splice_ready(kGuest);
      return on_send(kUp, res);
    case kConnect:
      if (phase_ == Phase::closing) return;
      return on_connected(res);
    case kSocket:
      if (res < 0) {
        if (is_out_of_resources(-res)) obs_.on_out_of_resources(-res);
        socket_error_ = -res;
      }
      return;
    case kInstall:
      if (res >= 0) up_.set_fd(UniqueFd(res));
      // The guest's FIN waited for this fd: shutdown(2) on it, or (none to be had)
      // the io-wq op.
      if (std::exchange(shutdown_on_fd_, false) && phase_ != Phase::closing) shutdown_up();
      return;
    case kShutdown: return;
    default: return;
  }
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
    return close(true);
  }
  last_activity_ = loop_.now_ms();
  if (res == 0) {
    if (phase_ != Phase::relaying) {
      if (side == kUp) return advance(dial_->on_closed());
      return close(true);
    }
    return handle_eof(side);
  }
  uint8_t* data = loop_.buffers().data(static_cast<uint16_t>(bid));
  uint32_t len = static_cast<uint32_t>(res);
  if (phase_ != Phase::relaying) return on_dial_bytes(data, len, bid);
  if (tls_ && side == kUp) {
    tls_->feed(data, len);
    loop_.give_back(static_cast<uint16_t>(bid));
    return pump_to_guest();
  }
  if (tls_) {  // plaintext from the guest, encrypted into the write BIO
    TlsSession::Io io = tls_->write(data, len);
    loop_.give_back(static_cast<uint16_t>(bid));
    if (io != TlsSession::Io::ok) return close(true);
    return pump_to_up();
  }
  Flow& f = flow_[side];
  f.bid = bid;
  f.data = data;
  f.off = 0;
  f.len = len;
  // More bytes or the FIN already wait on the source: send with MSG_MORE so the next
  // send, or the shutdown, fills the same segment (a reply and its FIN go as one
  // packet). The next recv completes at once, so nothing stays corked for long.
  f.more = (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
  maybe_start_splice(side, len);
  if (side == kGuest) pump_to_up();
  else pump_to_guest();
}

// Bytes of the dial's exchange. Without TLS, whatever follows the reply is already
// tunnelled data for the guest: it stays in its buffer and is sent on from there
// (inside TLS it stays in the session).
void RelayConnection::on_dial_bytes(uint8_t* data, uint32_t len, int32_t bid) {
  const EgressDial::Step step = dial_->on_received(data, len);
  const auto used = static_cast<uint32_t>(dial_->consumed());
  if (step == EgressDial::Step::dialed && used < len) {
    Flow& f = flow_[kUp];
    f.bid = bid;
    f.data = data;
    f.off = used;
    f.len = len - used;
  } else {
    loop_.give_back(static_cast<uint16_t>(bid));
  }
  advance(step);
}

void RelayConnection::on_send(int side, int32_t res) {
  Flow& f = flow_[side == kGuest ? kUp : kGuest];  // the flow that sends to `side`
  if (phase_ == Phase::closing) return;
  if (res < 0) {
    if (phase_ != Phase::relaying) return advance(dial_->on_io_error("send", -res));
    return close(true);
  }
  f.off += static_cast<uint32_t>(res);
  f.len -= static_cast<uint32_t>(res);
  if (f.len == 0) release_flow_buffer(f);
  if (side == kUp) pump_to_up();
  else pump_to_guest();
}

// Moves pending bytes toward the endpoint; when none are left, re-arms the guest
// read (at most one send in flight: a slow endpoint stops reads from the guest).
void RelayConnection::pump_to_up() {
  if (in_flight(kUpSend) || phase_ == Phase::closing) return;
  Flow& f = flow_[kGuest];
  // The dial's requests (ciphertext inside TLS) go out like relayed bytes, by a send
  // SQE from a pool buffer: the upstream socket may have no fd to send() on.
  if (f.len == 0 && dial_ && dial_->pending_out() > 0) {
    if (f.pooled == nullptr) f.pooled = loop_.pool().take();
    if (f.pooled == nullptr) return dial_failed("out of memory");
    f.data = f.pooled;
    f.off = 0;
    f.len = static_cast<uint32_t>(dial_->take_out(f.pooled, loop_.pool().buffer_size()));
  }
  if (f.len == 0 && tls_ && tls_->pending_out() > 0) {
    if (f.pooled == nullptr) f.pooled = loop_.pool().take();
    if (f.pooled == nullptr) return close(true);
    f.data = f.pooled;
    f.off = 0;
    f.len = static_cast<uint32_t>(tls_->take_out(f.pooled, loop_.pool().buffer_size()));
  }
  if (f.len > 0) return submit_send(kUp, f.data + f.off, f.len, f.more);
  release_flow_buffer(f);
  if (phase_ != Phase::relaying) return;
  if (f.eof) {
    if (!f.shut) {
      shutdown_up();
      f.shut = true;
    }
    return maybe_finish();
  }
  if (!f.need_buffer) arm_recv(kGuest);
}

void RelayConnection::pump_to_guest() {
  if (in_flight(kGuestSend) || phase_ != Phase::relaying) return;
  Flow& f = flow_[kUp];
  if (f.len == 0 && tls_ && !f.eof) {
    if (f.pooled == nullptr) f.pooled = loop_.pool().take();
    if (f.pooled == nullptr) return close(true);
    size_t n = 0;
    TlsSession::Io io = tls_->read(f.pooled, loop_.pool().buffer_size(), &n);
    pump_to_up();  // reading may have queued protocol bytes (key update, alerts)
    if (io == TlsSession::Io::ok) {
      f.data = f.pooled;
      f.off = 0;
      f.len = static_cast<uint32_t>(n);
    } else if (io == TlsSession::Io::closed) {
      f.eof = true;
    } else if (io == TlsSession::Io::error) {
      return close(true);
    }
  }
  if (f.len > 0) return submit_send(kGuest, f.data + f.off, f.len, f.more);
  release_flow_buffer(f);
  if (f.eof) {
    if (!f.shut) {
      ::shutdown(guest_.fd(), SHUT_WR);
      f.shut = true;
    }
    return maybe_finish();
  }
  if (!f.need_buffer) arm_recv(kUp);
}

void RelayConnection::handle_eof(int side) {
  Flow& f = flow_[side];
  f.eof = true;
  if (side == kUp) {
    // A TLS stream must end with close_notify; without it the data may be cut short.
    if (tls_) tls_->feed_eof();
    if (tls_ && f.len == 0) {
      size_t n = 0;
      if (f.pooled == nullptr) f.pooled = loop_.pool().take();
      if (f.pooled == nullptr) return close(true);
      TlsSession::Io io = tls_->read(f.pooled, loop_.pool().buffer_size(), &n);
      if (io == TlsSession::Io::ok) {
        f.data = f.pooled;
        f.off = 0;
        f.len = static_cast<uint32_t>(n);
        f.eof = false;  // more plaintext first; the EOF is seen again on the next read
      } else if (io == TlsSession::Io::error) {
        return close(true);
      }
    }
    return pump_to_guest();
  }
  if (tls_) tls_->shutdown();  // queues close_notify before our FIN
  pump_to_up();
}

void RelayConnection::maybe_finish() {
  if (flow_[kGuest].shut && flow_[kUp].shut) close(false);
}

void RelayConnection::on_buffer_available() {
  for (int side : {kGuest, kUp}) {
    if (!flow_[side].need_buffer) continue;
    flow_[side].need_buffer = false;
    arm_recv(side);
  }
}

void RelayConnection::rearm_timer() {
  if (phase_ == Phase::closing) return;
  uint64_t d = phase_ == Phase::relaying ? last_activity_ + timeouts_.idle_ms : phase_deadline_;
  if (drain_deadline_ != 0 && (d == 0 || drain_deadline_ < d)) d = drain_deadline_;
  if (d == 0) return timer_.cancel();
  loop_.timers().arm(timer_, d);
}

void RelayConnection::on_timer(uring::Timer&) {
  uint64_t now = loop_.now_ms();
  if (drain_deadline_ != 0 && now >= drain_deadline_) return close(true);
  switch (phase_) {
    case Phase::relaying:
      if (now >= last_activity_ + timeouts_.idle_ms) return close(true);
      return rearm_timer();
    case Phase::connecting:
      if (now >= phase_deadline_) {
        connect_timed_out_ = true;
        cancel_op(kConnect);  // its CQE (-ECANCELED) tries the next address
        return;
      }
      return rearm_timer();
    case Phase::handshake:
      if (now >= phase_deadline_) return advance(dial_->on_timeout());
      return rearm_timer();
    default: return rearm_timer();
  }
}

void RelayConnection::drain_until(uint64_t deadline_ms) {
  if (phase_ == Phase::closing || drain_deadline_ != 0) return;
  if (deadline_ms <= loop_.now_ms()) return close(true);
  drain_deadline_ = deadline_ms;
  rearm_timer();
}

void RelayConnection::dial_failed(const std::string& reason, bool refused) {
  if (phase_ == Phase::closing) return;
  obs_.on_dial_failed(*this, reason, refused);
  close(true);  // "a refused or failed dial resets the guest connection"
}

void RelayConnection::close(bool reset) {
  if (phase_ == Phase::closing) return;
  phase_ = Phase::closing;
  if (reset) {
    guest_.reset_on_close();
    up_.reset_on_close();
  }
  timer_.cancel();
  loop_.stop_waiting(*this);
  obs_.on_closed(*this);
  close_ops();  // may release: nothing after it
}

// Frees buffers only once every operation has reported its own CQE ("a buffer is
// never freed on the cancel CQE").
void RelayConnection::on_released() {
  release_flow_buffer(flow_[kGuest]);
  release_flow_buffer(flow_[kUp]);
  tls_.reset();
  dial_.reset();
  obs_.on_released(*this);  // deletes this
}

}  // namespace kib::relay
