// A relayed connection's life: the dial's socket operations (the dial's logic is
// egress_dial.cpp), completion dispatch, timers (connect, handshake, idle, drain, TLS buffer release), close
// and release. The relaying itself is relay_flows.cpp (copy, TLS) and
// relay_splice.cpp (bulk flows).
#include "agent/relay/relay_connection.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "uring/socket_ops.h"

namespace kib::relay {

namespace {

// A TLS connection quiet this long gives back its session's spare buffers.
constexpr uint64_t kTlsReleaseAfterMs = 1000;

// Out of descriptors or socket memory: the owner stops accepting for a while.
bool is_out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

uint64_t monotonic_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

int socket_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : 0;
}

}  // namespace

RelayConnection::RelayConnection(uring::Loop& loop, ConnectionObserver& obs, const RelayTimeouts& timeouts,
                                 UniqueFd guest_fd, DialTargetPtr target)
    : uring::OpOwner(loop),
      obs_(obs),
      timeouts_(timeouts),
      target_(std::move(target)),
      timer_(this),
      guest_(std::move(guest_fd)),
      opened_ms_(loop.now_ms()) {}

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
  dial_ = std::make_unique<EgressDial>(DialPlan{.egress = target_.get(),
                                                .destination = original_dst,
                                                .pipelined = target_->socks_pipelining.load(std::memory_order_relaxed),
                                                .address_policy = &obs_.address_policy()});
  last_activity_ = loop_.now_ms();
  if (target_->timings) started_ns_ = stage_started_ns_ = monotonic_ns();
  watch_guest();  // first: a dial that fails at once releases this
  advance(dial_->start());
}

// While dialing nothing reads the guest's socket, so its reset would go unseen until
// the dial ended (a guest's RST storm would stay counted active for seconds): a poll
// waits for it. A FIN alone (the guest sent its request and half-closed) ends the
// watch without ending the connection: the relay reads the FIN in turn.
void RelayConnection::watch_guest() {
  guest_watch_ = true;
  io_uring_sqe* s = start_op(kGuestRecv);
  io_uring_prep_poll_add(s, -1, POLLRDHUP);
  guest_.aim(s);
}

void RelayConnection::on_guest_watch(int32_t res) {
  guest_watch_ = false;
  if (phase_ == Phase::closing) return;
  if (res > 0 && (res & (POLLERR | POLLHUP)) != 0 && phase_ != Phase::relaying)
    return close(true, CloseReason::guest_reset);
  if (phase_ == Phase::relaying) pump(kGuest);  // the relay started meanwhile: its recv waited for this
}

void RelayConnection::note_dial_stage() {
  DialTimings* t = target_->timings.get();
  if (t == nullptr || !dial_) return;
  const EgressDial::Stage now_at = dial_->stage();
  if (now_at == stage_) return;
  const EgressDial::Stage was = std::exchange(stage_, now_at);
  // Only stages that succeeded count: a failed one is a dial failure (by cause).
  if (now_at == EgressDial::Stage::done && dial_->step() != EgressDial::Step::dialed) return;
  const uint64_t now = monotonic_ns();
  const uint64_t us = (now - stage_started_ns_) / 1000;
  switch (was) {
    case EgressDial::Stage::resolve:
      if (!target_->endpoint.ip) t->resolve.observe_us(us);
      break;
    case EgressDial::Stage::connect: t->connect.observe_us(us); break;
    case EgressDial::Stage::tls: (dial_->tls_resumed() ? t->tls_resumed : t->tls_full).observe_us(us); break;
    case EgressDial::Stage::socks5: t->socks5.observe_us(us); break;
    case EgressDial::Stage::done: break;
  }
  stage_started_ns_ = now;
  if (now_at == EgressDial::Stage::done) t->dial.observe_us((now - started_ns_) / 1000);
}

void RelayConnection::note_first_byte() {
  first_byte_seen_ = true;
  if (DialTimings* t = target_->timings.get()) t->first_byte.observe_us((monotonic_ns() - started_ns_) / 1000);
}

void RelayConnection::on_resolved(Result<std::vector<policy::IpAddress>> addrs) {
  if (phase_ == Phase::closing) return unhold(kResolve);  // may release: nothing after it
  unhold(kResolve);
  advance(dial_->on_resolved(std::move(addrs)));
}

// Carries out the step the dial (egress_dial.h) asks for next.
void RelayConnection::advance(EgressDial::Step step) {
  note_dial_stage();
  switch (step) {
    case EgressDial::Step::resolve:
      phase_ = Phase::resolving;
      hold(kResolve);
      return obs_.resolve(*this, dial_->host());
    case EgressDial::Step::connect: return connect_next();
    case EgressDial::Step::exchange: pump(kGuest); return arm_recv(kUp);
    case EgressDial::Step::dialed: return enter_relay();
    case EgressDial::Step::failed: {
      const DialFailure& f = dial_->failure();
      // The revision's later dials wait for each reply.
      if (f.pipelining_unanswered) target_->socks_pipelining.store(false, std::memory_order_relaxed);
      return dial_failed(f.cause, f.reason);
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
  tls_release_due_ = tls_ != nullptr;  // the handshake's flights may have grown its buffers
  dial_.reset();
  last_activity_ = loop_.now_ms();
  rearm_timer();
  if (guest_watch_) cancel_op(kGuestRecv);  // its completion starts the guest's recv
  obs_.on_established(*this);
  pump(kUp);
  pump(kGuest);
}

// The operation's bit is clear already; while closing, OpOwner releases after the
// last CQE.
void RelayConnection::on_complete(unsigned tag, int32_t res, uint32_t flags) {
  if (phase_ == Phase::moving) return on_move_complete(tag, res, flags);
  // A splicing flow's waits: POLLIN on its source (recv tag), POLLOUT on its
  // destination (the destination's send tag).
  auto splice_ready = [&](int side) {
    if (phase_ == Phase::closing) return;
    if (res < 0 && res != -ETIME) return close_on_error();  // -ETIME: a coalescing wait ended
    splice_flow(side);
  };
  switch (tag) {
    case kGuestRecv:
      if (guest_watch_) return on_guest_watch(res);
      return flow_[kGuest].pipe ? splice_ready(kGuest) : on_recv(kGuest, res, flags);
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

void RelayConnection::rearm_timer() {
  if (phase_ == Phase::closing || phase_ == Phase::moving) return;
  uint64_t d = phase_ == Phase::relaying ? last_activity_ + timeouts_.idle_ms : phase_deadline_;
  if (phase_ == Phase::relaying && tls_release_due_) d = std::min(d, last_activity_ + kTlsReleaseAfterMs);
  if (drain_deadline_ != 0 && (d == 0 || drain_deadline_ < d)) d = drain_deadline_;
  if (d == 0) return timer_.cancel();
  loop_.timers().arm(timer_, d);
}

void RelayConnection::on_timer(uring::Timer&) {
  uint64_t now = loop_.now_ms();
  if (drain_deadline_ != 0 && now >= drain_deadline_) return close(true, CloseReason::drain_deadline);
  switch (phase_) {
    case Phase::relaying:
      if (now >= last_activity_ + timeouts_.idle_ms) return close(true, CloseReason::idle_timeout);
      if (tls_release_due_ && now >= last_activity_ + kTlsReleaseAfterMs) {
        tls_release_due_ = false;
        tls_->release_spare_buffers();
      }
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
  if (deadline_ms <= loop_.now_ms()) return close(true, CloseReason::drain_deadline);
  drain_deadline_ = deadline_ms;
  rearm_timer();
}

void RelayConnection::dial_failed(DialCause cause, const std::string& reason) {
  if (phase_ == Phase::closing) return;
  obs_.on_dial_failed(*this, cause, reason);
  close(true, CloseReason::dial_failed);  // "a refused or failed dial resets the guest connection"
}

void RelayConnection::close_on_error() {
  if (socket_error(guest_.fd()) != 0) return close(true, CloseReason::guest_reset);
  close(true, socket_error(up_.fd()) != 0 ? CloseReason::upstream_reset : CloseReason::relay_error);
}

void RelayConnection::close(bool reset, CloseReason why) {
  if (phase_ == Phase::closing) return;
  close_reason_ = why;
  // A move that ends here (it failed, or an abort came first) still tells the owner.
  const bool move_ended = phase_ == Phase::moving;
  phase_ = Phase::closing;
  if (reset) {
    guest_.reset_on_close();
    up_.reset_on_close();
  }
  timer_.cancel();
  loop_.stop_waiting(*this);
  if (move_ended) obs_.on_moved(*this, MovedRelay{});
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
