#pragma once
// The SOCKS5 client side of one connection (RFC 1928 CONNECT, RFC 1929 user/password)
// as a pure state machine: bytes in, bytes out, an outcome. No sockets, so every
// step, partial input and reply code is unit-tested directly. Small on purpose (it
// lives in every connection being dialed): replies are parsed as they stream in,
// requests are written into the caller's buffer.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/relay/socket_address.h"

namespace kib::relay {

enum class Socks5Failure : uint8_t {
  none = 0,
  // Server reply codes (RFC 1928 section 6), in order of their REP value 1..8.
  general_failure,
  not_allowed_by_ruleset,
  network_unreachable,
  host_unreachable,
  connection_refused,
  ttl_expired,
  command_not_supported,
  address_type_not_supported,
  unknown_reply_code,    // REP 9..255
  bad_version,           // the server did not answer as SOCKS5
  no_acceptable_method,  // 0xFF, or a method we did not offer
  auth_failed,           // RFC 1929 status != 0
  malformed_reply,       // bad RSV/ATYP or auth version
};

// Stable, lowercase names used as status reasons ("socks5: connection_refused").
std::string_view socks5_failure_name(Socks5Failure f);

// The request that follows the greeting (RFC 1928 section 4).
enum class Socks5Command : uint8_t { connect = 1, udp_associate = 3 };

// BND.ADDR and BND.PORT of a successful reply: an IP address (ATYP 1 or 4), or a
// domain name (ATYP 3, not kept: nothing of ours dials a name a server hands out).
struct Socks5Bound {
  bool is_domain = false;
  SocketAddress address{};  // AF_UNSPEC when there is none
};

struct Socks5Credentials {
  std::string username;  // empty: offer no-auth only
  std::string password;
};

class Socks5Client {
 public:
  enum class State : uint8_t { greeting, auth, connect, done, failed };
  // Largest output: pipelined greeting (3), RFC 1929 request (3 + 255 + 255) and
  // CONNECT to an IPv6 address (22).
  static constexpr size_t kMaxOutput = 3 + 513 + 22;

  // dst: the original destination (AF_INET or AF_INET6), sent as ATYP 1 or 4 (for
  // UDP ASSOCIATE: the address the datagrams will come from, zeros when not known).
  // creds must outlive the client. pipelined: the greeting goes out together with
  // the requests that follow it (credentials, CONNECT) instead of each waiting for
  // the reply before it; only for a server known to read them in turn (a server that
  // reads one message per recv() would drop the rest, e.g. microsocks 1.0.3).
  Socks5Client(const Socks5Credentials& creds, const sockaddr* dst, bool pipelined = false,
               Socks5Command command = Socks5Command::connect);

  // Makes the greeting due (the first output).
  void start() { output_due_ = true; }
  // The request due now (greeting, auth or CONNECT) is written with write_output
  // into a buffer of at least kMaxOutput bytes; take_output() marks it sent.
  bool output_due() const { return output_due_; }
  size_t write_output(uint8_t* buf) const;
  void take_output() { output_due_ = false; }

  // Feeds received bytes. Returns how many were consumed: it stops where a request
  // falls due (send it, then feed the rest) and at `done` (the rest is tunnelled data).
  size_t feed(const uint8_t* data, size_t len);
  // The most bytes feed() takes before the current reply is complete (0 when the
  // exchange is over): a caller reading from a stream it must not over-read (TLS,
  // whose later plaintext is the tunnel's) reads no more than this.
  size_t bytes_wanted() const;

  State state() const { return state_; }
  Socks5Failure failure() const { return failure_; }
  // The failure's name, with what the server sent when it was no SOCKS5 reply at all
  // ("bad_version (not a SOCKS5 server: its reply starts 48 54 "HT")").
  std::string failure_text() const;
  bool pipelined() const { return pipelined_; }
  // Whether the failure is the server's answer to the CONNECT (a reply code).
  bool connect_answered() const;
  // After done: the reply's BND.ADDR and BND.PORT (UDP ASSOCIATE's relay address).
  Socks5Bound bound() const;

 private:
  void on_message();
  void fail(Socks5Failure f);
  uint8_t* write_greeting(uint8_t* p) const;
  uint8_t* write_auth(uint8_t* p) const;
  uint8_t* write_connect(uint8_t* p) const;

  const Socks5Credentials& creds_;
  union {
    sockaddr_in v4;
    sockaddr_in6 v6;
  } dst_{};
  State state_ = State::greeting;
  Socks5Failure failure_ = Socks5Failure::none;
  bool output_due_ = false;
  bool pipelined_ = false;
  Socks5Command command_ = Socks5Command::connect;
  // The current reply's bytes, up to an IPv6 BND (a domain BND's tail is not kept).
  uint8_t head_[4 + 16 + 2] = {};
  uint16_t have_ = 0;  // bytes of the current reply seen
  uint16_t need_ = 2;  // its length, once known
};

}  // namespace kib::relay
