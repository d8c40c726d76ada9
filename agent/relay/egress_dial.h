#pragma once
// One dial through an Egress, as a pure state machine: resolve the endpoint, check
// every address (special-purpose), connect to one that passed, TLS when the Egress has
// it, SOCKS5 greeting, credentials and the command (CONNECT or UDP ASSOCIATE). It
// ends "dialed" (the connected socket is the caller's; plus the TLS session and the
// bytes that followed the reply) or "failed" (a reason, and whether the address check
// refused the endpoint). No sockets, no clock: the io_uring users (RelayConnection,
// dns::UpstreamStream) and the blocking pipelining probe feed it events and carry out
// the step it asks for, so "the endpoint is checked again on every dial" is written
// once, here, and unit-tested without a network.
//
// Address policy: every resolved address is checked before the first connect, and
// only those that passed are tried, in the resolver's order. "Refused" means every
// address failed the check (no connect at all).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/common/result.h"
#include "agent/policy/ip_address.h"
#include "agent/policy/special_purpose.h"
#include "agent/relay/dial_target.h"
#include "agent/relay/socket_address.h"
#include "agent/relay/socks5_client.h"
#include "agent/relay/tls_session.h"

namespace kib::relay {

struct DialPlan {
  // Null: a plain TCP connection straight to `destination` (a DNS resolver without an
  // Egress, whose address was checked when the policy was written): no resolution, no
  // check, no handshake.
  const DialTarget* egress = nullptr;
  // Through an Egress: the CONNECT's destination (ignored for UDP ASSOCIATE, which
  // asks with zeros of the endpoint's family: the datagrams' source is not known yet).
  SocketAddress destination{};
  Socks5Command command = Socks5Command::connect;
  // The requests go out with the greeting (socks5_pipelining_probe.h).
  bool pipelined = false;
  // Required with an Egress; must outlive the dial.
  const policy::EndpointAddressPolicy* address_policy = nullptr;
};

// Why a dial failed, in few enough kinds to be a metric label.
enum class DialCause : uint8_t {
  resolve,   // the endpoint's name did not resolve
  refused,   // every endpoint address failed the special-purpose check
  connect,   // no endpoint address accepted the TCP connection (refused, unreachable, timed out)
  tls,       // the TLS handshake failed (verification included)
  socks5,    // the SOCKS5 server refused or answered out of protocol
  closed,    // the endpoint closed the connection during the handshake
  timeout,   // the handshake took longer than dataplane.handshake_timeout
  io_error,  // a send or recv on the endpoint's socket failed during the handshake
  local,     // the agent could not (out of memory, the revision not published)
};
inline constexpr size_t kDialCauseCount = 9;
std::string_view dial_cause_name(DialCause c);

struct DialFailure {
  DialCause cause = DialCause::local;
  std::string reason;
  bool refused = false;  // every endpoint address failed the special-purpose check
  // A pipelined handshake ended after the greeting's reply without the answer to the
  // request sent with it: the server reads one message at a time after all.
  bool pipelining_unanswered = false;
};

class EgressDial {
 public:
  enum class Step : uint8_t {
    resolve,   // resolve host(), then on_resolved()
    connect,   // open a TCP socket, connect it to peer(), then on_connected()
    exchange,  // send take_out()'s bytes, pass received ones to on_received()
    dialed,    // done: the socket is ready (see take_tls(), consumed(), bound())
    failed,    // failure() says why; the socket, if any, is to be closed
  };

  // plan.egress (when set) must outlive the dial.
  explicit EgressDial(const DialPlan& plan);
  EgressDial(const EgressDial&) = delete;
  EgressDial& operator=(const EgressDial&) = delete;

  Step start();
  Step on_resolved(Result<std::vector<policy::IpAddress>> addresses);
  // err: 0 when connected, else the errno of socket() or connect() (ETIMEDOUT when
  // the caller's connect deadline passed). A failed address moves on to the next.
  Step on_connected(int err);
  // Bytes from the endpoint. Without TLS, consumed() tells how many of them the
  // handshake took once dialed: the rest are the tunnel's first bytes.
  Step on_received(const uint8_t* data, size_t len);
  // The endpoint closed its side, a send or recv failed (op: "send", "recv"), or the
  // caller's handshake deadline passed.
  Step on_closed();
  Step on_io_error(const char* op, int err);
  Step on_timeout();

  Step step() const { return step_; }
  // Where the dial is, for its stage timings: resolving and connecting follow step();
  // the exchange is the TLS handshake first (with TLS), then SOCKS5.
  enum class Stage : uint8_t { resolve, connect, tls, socks5, done };
  Stage stage() const;
  bool tls_resumed() const { return tls_ && tls_->resumed(); }
  const std::string& host() const { return plan_.egress->endpoint.host; }
  const SocketAddress& peer() const { return peer_; }
  // Bytes to send now (ciphertext inside TLS), taken in pieces of at most cap.
  size_t pending_out() const;
  size_t take_out(uint8_t* buf, size_t cap);

  // After dialed.
  std::unique_ptr<TlsSession> take_tls() { return std::move(tls_); }
  size_t consumed() const { return consumed_; }
  Socks5Bound bound() const { return socks_ ? socks_->bound() : Socks5Bound{}; }
  // Whether the server answered the request after the greeting (dialed, or refused it
  // with a reply code): the pipelining probe's question.
  bool request_answered() const { return socks_ && socks_->connect_answered(); }

  // After failed.
  const DialFailure& failure() const { return failure_; }

 private:
  Step connect_next();
  Step handshake();
  Step start_socks();
  Step feed_socks(const uint8_t* data, size_t len, size_t* used);
  Step queue_socks_output();
  Step fail(DialCause cause, std::string reason);

  DialPlan plan_;
  std::vector<policy::IpAddress> addresses_;  // those that passed the check
  size_t next_ = 0;
  SocketAddress peer_{};
  std::unique_ptr<TlsSession> tls_;
  std::optional<Socks5Client> socks_;
  std::string last_error_;
  DialFailure failure_;
  size_t consumed_ = 0;
  Step step_ = Step::resolve;
  bool tls_handshaking_ = false;
  uint16_t out_len_ = 0;
  uint16_t out_off_ = 0;
  uint8_t out_[Socks5Client::kMaxOutput];  // plaintext requests (without TLS)
};

// "ip:port", "[ip6]:port".
std::string to_string(const SocketAddress& a);

}  // namespace kib::relay
