#pragma once
// One guest TCP connection relayed through an Egress: the dial (egress_dial.h: resolve,
// address check, connect, optional TLS, SOCKS5) driven on the loop, then bytes both
// ways until both sides are done.
// Lives on one loop; freed only after the CQE of every operation it submitted.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/common/unique_fd.h"
#include "agent/policy/ip_address.h"
#include "agent/policy/special_purpose.h"
#include "agent/relay/dial_target.h"
#include "agent/relay/egress_dial.h"
#include "agent/relay/moved_relay.h"
#include "agent/relay/relay_accounting.h"
#include "agent/relay/socket_address.h"
#include "agent/relay/splice_pipe.h"
#include "agent/relay/tls_session.h"
#include "uring/intrusive_list.h"
#include "uring/loop.h"
#include "uring/op_owner.h"
#include "uring/socket_handle.h"

namespace kib::relay {

class RelayConnection;

// What a connection needs from, and tells, the data plane that owns it.
class ConnectionObserver {
 public:
  // Starts resolving host; must later call c.on_resolved() exactly once, on c's loop.
  virtual void resolve(RelayConnection& c, const std::string& host) = 0;
  // The special-purpose check (with the config's exemptions) every dial applies.
  virtual const policy::EndpointAddressPolicy& address_policy() = 0;
  virtual void on_established(RelayConnection& c) = 0;
  // The dial failed (DialCause::refused: every address of the endpoint failed the
  // special-purpose check); the connection closes next.
  virtual void on_dial_failed(RelayConnection& c, DialCause cause, const std::string& reason) = 0;
  // Opening the upstream socket failed for want of descriptors or socket memory
  // (errno err): the owner should stop accepting until they return.
  virtual void on_out_of_resources(int err) = 0;
  // The connection stopped counting (closing); its operations may still be pending.
  virtual void on_closed(RelayConnection& c) = 0;
  // Every operation finished and every resource is released: delete c now.
  virtual void on_released(RelayConnection& c) = 0;
  // Once per move_out(): the connection's sockets and bytes, for the next process, and
  // then c closes (on_closed, on_released) without touching them; or, when it reset
  // instead, an empty MovedRelay (no guest socket).
  virtual void on_moved(RelayConnection& c, MovedRelay moved) = 0;

 protected:
  ~ConnectionObserver() = default;
};

struct RelayTimeouts {
  uint64_t connect_ms = 10000;
  uint64_t handshake_ms = 10000;
  uint64_t idle_ms = 3600000;
  // The longest a splicing flow whose source ran dry lets bytes gather before it
  // reads again (0: it waits for readability, a wake-up per burst the sender makes).
  // A sender slower than the relay (the usual case downstream of a SOCKS server)
  // otherwise wakes the loop for every small burst. The first wait after a burst is
  // this long, later ones are sized from the flow's rate (gather_wait.h). Only bytes
  // that arrive within a wait of the previous read wait; a flow that stays dry for a
  // whole wait waits for readability again.
  uint32_t splice_coalesce_us = 8000;
};

// The owner's list of its connections (a RelayConnection is on at most one).
struct OwnerListTag {};

class RelayConnection final : private uring::OpOwner,
                              private uring::TimerHandler,
                              private uring::BufferWaiter,
                              public uring::ListNode<OwnerListTag> {
 public:
  // guest_fd: an accepted TPROXY socket (its local address is the original
  // destination).
  RelayConnection(uring::Loop& loop, ConnectionObserver& obs, const RelayTimeouts& timeouts, UniqueFd guest_fd,
                  DialTargetPtr target);
  ~RelayConnection();
  RelayConnection(const RelayConnection&) = delete;
  RelayConnection& operator=(const RelayConnection&) = delete;

  // original_dst: the accepted socket's local address (TPROXY keeps the guest's
  // original destination there), read once by the owner.
  void start(const SocketAddress& original_dst);
  void on_resolved(Result<std::vector<policy::IpAddress>> addrs);
  // Drain: closes at deadline_ms (now or earlier: at once). A connection already
  // draining keeps its own deadline.
  void drain_until(uint64_t deadline_ms);
  // Resets both sides now (the agent ended it: CloseReason::agent_closed).
  void abort() { close(true, CloseReason::agent_closed); }
  // Take-over (relay_move.cpp): an established plain relay stops, cancels what it has
  // in flight, and hands its sockets and unsent bytes to the observer's on_moved; one
  // that cannot (no plain fd for its upstream socket, a socket error meanwhile) resets.
  bool movable() const { return phase_ == Phase::relaying && !tls_; }
  void move_out();
  // In place of start(): relays on from where the other process's move_out stopped.
  // The guest socket given to the constructor must be moved.guest's.
  void resume(MovedRelay moved);

  // TLS: what the session's ciphertext buffers hold allocated (0 without TLS).
  size_t tls_buffer_bytes() const { return tls_ ? tls_->bio_capacity() : 0; }
  bool draining() const { return drain_deadline_ != 0; }
  bool closing() const { return phase_ == Phase::closing; }
  bool established() const { return phase_ == Phase::relaying; }
  // Still dialing its Egress (resolve, connect, TLS, SOCKS5).
  bool dialing() const { return phase_ < Phase::relaying; }
  const DialTarget& target() const { return *target_; }
  // Where its bytes are counted (the owner's; must outlive the connection).
  void set_traffic(TrafficCounters* t) { traffic_ = t; }
  // Why it closed: set once closing() (before the owner's on_closed).
  CloseReason close_reason() const { return close_reason_; }
  uint64_t bytes_from_guest() const { return bytes_[kGuest]; }
  uint64_t bytes_to_guest() const { return bytes_[kUp]; }
  // The loop's clock (ms) when this process took it (accepted, or adopted).
  uint64_t opened_ms() const { return opened_ms_; }
  // The guest's address, kept by the owner when something (the access log) reports it.
  std::unique_ptr<SocketAddress> guest_peer;
  SocketAddress original_dst() const;
  int guest_fd() const { return guest_.fd(); }

  // The owner's context (its list is uring::IntrusiveList<RelayConnection, OwnerListTag>).
  void* owner_context = nullptr;
  // The owner's name for it (the live connections view).
  uint64_t id = 0;

 private:
  enum class Phase : uint8_t { idle, resolving, connecting, handshake, relaying, moving, closing };
  enum Side : int { kGuest = 0, kUp = 1 };
  enum Tag : unsigned {
    kGuestRecv = 0,
    kGuestSend = 1,
    kUpRecv = 2,
    kUpSend = 3,
    kConnect = 4,
    kShutdown = 5,  // FIN to the endpoint on a slot (runs in an io-wq worker)
    kSocket = 6,    // the upstream socket opened into a slot
    kInstall = 7,   // a plain fd for the slot's socket (splice needs one)
    kResolve = 8,   // held (OpOwner::hold): the resolver calls back, not a CQE
  };
  struct Flow {  // bytes read from one side, waiting to be sent to the other
    uint8_t* data = nullptr;
    uint32_t off = 0;
    uint32_t len = 0;
    int32_t bid = -1;           // provided buffer held
    uint8_t* pooled = nullptr;  // pool buffer held
    bool eof = false;           // the source sent FIN
    bool shut = false;          // FIN passed on to the destination
    bool need_buffer = false;   // recv got ENOBUFS
    bool out_poll = false;      // the destination's send tag is a POLLOUT wait (splice)
    bool more = false;          // the source had more queued (bytes or FIN) at the last recv
    bool tls_out = false;       // data points into the TLS session's outbox (TlsSession::next_out)
    // Set once the flow is bulk (plain relay only): from then on its bytes move by
    // splice and its recv tag is a POLLIN wait on the source.
    std::unique_ptr<SplicePipe> pipe;
    std::unique_ptr<uint8_t[]> moved;  // bytes a resumed connection brought (data points in)
  };

  static int other(int side) { return side == kGuest ? kUp : kGuest; }
  static unsigned recv_tag(int side) { return side == kGuest ? kGuestRecv : kUpRecv; }
  static unsigned send_tag(int side) { return side == kGuest ? kGuestSend : kUpSend; }
  const uring::SocketHandle& socket(int side) const { return side == kGuest ? guest_ : up_; }
  // The plain fd of a side (-1: the upstream socket has only its slot so far).
  int fd(int side) const { return socket(side).fd(); }

  void on_complete(unsigned tag, int32_t res, uint32_t flags) override;
  void on_released() override;
  void on_timer(uring::Timer& t) override;
  void on_buffer_available() override;

  void advance(EgressDial::Step step);
  void connect_next();
  bool open_upstream();
  void shutdown_up();
  void ask_plain_fd();
  void shutdown_up_in_worker();
  void on_connected(int32_t res);
  void enter_relay();
  void on_dial_bytes(uint8_t* data, uint32_t len, int32_t bid);

  // Relaying (relay_flows.cpp): a flow is named by its source side.
  void arm_recv(int side);
  void on_recv(int side, int32_t res, uint32_t flags);
  void take_in(int side, uint8_t* data, uint32_t len, int32_t bid, bool more);
  void on_send(int to, int32_t res);
  void pump(int from);
  bool refill(int from);
  bool take_pool_buffer(Flow& f);
  void pass_fin(int to);
  void handle_eof(int side);
  void maybe_finish();
  void submit_send(int side, const uint8_t* data, uint32_t len, bool more);
  void release_flow_buffer(Flow& f);
  // Closes with an RST; false, for refill's callers.
  bool reset(CloseReason why);
  void tls_take_in(int side, const uint8_t* data, uint32_t len, int32_t bid);
  bool tls_refill(int from);
  void tls_end(int side);

  // Bulk flows (relay_splice.cpp).
  void maybe_start_splice(int side, uint32_t received);
  void splice_flow(int side);
  bool coalescing() const { return timeouts_.splice_coalesce_us != 0; }
  void arm_coalesce(int side);
  void arm_poll(int side, unsigned tag, unsigned mask);
  void set_receive_lowat(int side, uint32_t bytes);

  // Moving (relay_move.cpp).
  void on_move_complete(unsigned tag, int32_t res, uint32_t flags);
  void finish_move();
  MovedFlow take_moved_flow(int side);
  bool resume_flow(int side, MovedFlow&& m);

  void dial_failed(DialCause cause, const std::string& reason);
  void close(bool reset, CloseReason why);
  // A reset whose side is the one whose socket reports an error (relay_error: neither).
  void close_on_error();
  // Bytes of a flow (named by its source) that reached, or came from, the guest.
  void count(int side, uint64_t n) {
    if (side == kUp && !first_byte_seen_) note_first_byte();
    bytes_[side] += n;
    if (traffic_) (side == kGuest ? traffic_->from_guest : traffic_->to_guest).fetch_add(n, std::memory_order_relaxed);
  }
  // Dial stage timings (DialTarget::timings): each stage's end is observed when the
  // dial leaves it.
  void note_dial_stage();
  void note_first_byte();
  void watch_guest();
  void on_guest_watch(int32_t res);
  void rearm_timer();

  ConnectionObserver& obs_;
  const RelayTimeouts& timeouts_;
  DialTargetPtr target_;
  std::unique_ptr<EgressDial> dial_;  // only while dialing
  std::unique_ptr<TlsSession> tls_;
  uring::Timer timer_;
  Flow flow_[2];  // flow_[kGuest]: guest -> up; flow_[kUp]: up -> guest
  uint64_t phase_deadline_ = 0;
  uint64_t drain_deadline_ = 0;
  uint64_t last_activity_ = 0;
  uring::SocketHandle guest_;
  // In a direct-descriptor slot when the loop had one (plus a plain fd installed for
  // splice), else a plain fd.
  uring::SocketHandle up_;
  int socket_error_ = 0;  // IORING_OP_SOCKET's, when opening into a slot failed
  Phase phase_ = Phase::idle;
  bool nonblocking_ = false;
  bool asked_plain_fd_ = false;
  bool shutdown_on_fd_ = false;  // the guest's FIN waits for the slot's plain fd
  bool connect_timed_out_ = false;
  bool up_fin_ = false;           // TLS: the Egress's TCP stream ended (the session may hold more)
  bool tls_release_due_ = false;  // TLS: bytes moved since the session's buffers were released
  bool move_failed_ = false;
  bool guest_watch_ = false;      // the guest's recv tag is a poll for its reset while dialing
  bool first_byte_seen_ = false;  // the Egress's first byte after the dial was timed
  CloseReason close_reason_ = CloseReason::agent_closed;
  int first_eof_ = -1;  // the side whose FIN came first
  EgressDial::Stage stage_ = EgressDial::Stage::resolve;
  uint64_t started_ns_ = 0;  // monotonic: start()
  uint64_t stage_started_ns_ = 0;
  uint64_t bytes_[2] = {0, 0};  // [kGuest]: from the guest; [kUp]: to the guest
  uint64_t opened_ms_ = 0;
  TrafficCounters* traffic_ = nullptr;
};

}  // namespace kib::relay
