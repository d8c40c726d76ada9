#pragma once
// The SOCKS5 client side of one connection (RFC 1928 CONNECT, RFC 1929 user/password)
// as a pure state machine: bytes in, bytes out, an outcome. No sockets, so every
// step, partial input and reply code is unit-tested directly.
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
  unknown_reply_code,      // REP 9..255
  bad_version,             // the server did not answer as SOCKS5
  no_acceptable_method,    // 0xFF, or a method we did not offer
  auth_failed,             // RFC 1929 status != 0
  malformed_reply,         // bad RSV/ATYP or auth version
};

// Stable, lowercase names used as status reasons ("socks5: connection_refused").
std::string_view socks5_failure_name(Socks5Failure f);

struct Socks5Credentials {
  std::string username;  // empty: offer no-auth only
  std::string password;
};

class Socks5Client {
 public:
  enum class State : uint8_t { greeting, auth, connect, done, failed };

  // dst: the original destination (AF_INET or AF_INET6), sent as ATYP 1 or 4.
  Socks5Client(const Socks5Credentials& creds, const sockaddr* dst);

  // The greeting, to send first.
  std::string_view start();
  // Feeds received bytes. Returns how many were consumed (the rest, after `done`,
  // are tunnelled data). When a step completes and the next request is due, it is
  // in pending_output() until the caller takes it with take_output().
  size_t feed(const uint8_t* data, size_t len);
  std::string_view pending_output() const { return {reinterpret_cast<const char*>(out_.data()), out_len_}; }
  void take_output() { out_len_ = 0; }

  State state() const { return state_; }
  Socks5Failure failure() const { return failure_; }

 private:
  size_t need_for_state() const;
  void on_message();
  void fail(Socks5Failure f);
  void put(const void* p, size_t n);
  void build_auth();
  void build_connect();

  const Socks5Credentials& creds_;
  sockaddr_storage dst_{};
  State state_ = State::greeting;
  Socks5Failure failure_ = Socks5Failure::none;
  // Largest message in: a CONNECT reply with a 255-byte domain (4+1+255+2).
  std::array<uint8_t, 262> in_{};
  size_t in_len_ = 0;
  // Largest message out: RFC 1929 request (3 + 255 + 255).
  std::array<uint8_t, 513> out_{};
  size_t out_len_ = 0;
};

}  // namespace kib::relay
