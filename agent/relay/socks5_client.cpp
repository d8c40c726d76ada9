#include "agent/relay/socks5_client.h"

#include <algorithm>
#include <cstring>

namespace kib::relay {

namespace {
constexpr uint8_t kVersion = 5;
constexpr uint8_t kMethodNoAuth = 0x00;
constexpr uint8_t kMethodUserPass = 0x02;
constexpr uint8_t kAuthVersion = 1;
constexpr uint8_t kAtypV4 = 1;
constexpr uint8_t kAtypDomain = 3;
constexpr uint8_t kAtypV6 = 4;

uint8_t* put(uint8_t* p, const void* src, size_t n) {
  std::memcpy(p, src, n);
  return p + n;
}
}  // namespace

std::string_view socks5_failure_name(Socks5Failure f) {
  switch (f) {
    case Socks5Failure::none: return "none";
    case Socks5Failure::general_failure: return "general_failure";
    case Socks5Failure::not_allowed_by_ruleset: return "not_allowed_by_ruleset";
    case Socks5Failure::network_unreachable: return "network_unreachable";
    case Socks5Failure::host_unreachable: return "host_unreachable";
    case Socks5Failure::connection_refused: return "connection_refused";
    case Socks5Failure::ttl_expired: return "ttl_expired";
    case Socks5Failure::command_not_supported: return "command_not_supported";
    case Socks5Failure::address_type_not_supported: return "address_type_not_supported";
    case Socks5Failure::unknown_reply_code: return "unknown_reply_code";
    case Socks5Failure::bad_version: return "bad_version";
    case Socks5Failure::no_acceptable_method: return "no_acceptable_method";
    case Socks5Failure::auth_failed: return "auth_failed";
    case Socks5Failure::malformed_reply: return "malformed_reply";
  }
  return "unknown";
}

std::string Socks5Client::failure_text() const {
  std::string out(socks5_failure_name(failure_));
  if (failure_ != Socks5Failure::bad_version) return out;
  // head_ keeps the reply's first two bytes: enough to tell HTTP, TLS or SMTP apart.
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex, text;
  for (size_t i = 0; i < 2; ++i) {
    const uint8_t b = head_[i];
    hex += std::string(i ? " " : "") + kHex[b >> 4] + kHex[b & 15];
    text += (b >= 0x20 && b < 0x7f && b != '"') ? static_cast<char>(b) : '.';
  }
  return out + " (not a SOCKS5 server: its reply starts " + hex + " \"" + text + "\")";
}

Socks5Client::Socks5Client(const Socks5Credentials& creds, const sockaddr* dst, bool pipelined, Socks5Command command)
    : creds_(creds), pipelined_(pipelined), command_(command) {
  std::memcpy(&dst_, dst, dst->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
}

uint8_t* Socks5Client::write_greeting(uint8_t* p) const {
  // Offer only what is configured: a server accepting no-auth would otherwise skip
  // the credentials the operator set.
  const uint8_t g[] = {kVersion, 1, creds_.username.empty() ? kMethodNoAuth : kMethodUserPass};
  return put(p, g, sizeof g);
}

uint8_t* Socks5Client::write_auth(uint8_t* p) const {
  *p++ = kAuthVersion;
  *p++ = static_cast<uint8_t>(creds_.username.size());
  p = put(p, creds_.username.data(), creds_.username.size());
  *p++ = static_cast<uint8_t>(creds_.password.size());
  return put(p, creds_.password.data(), creds_.password.size());
}

uint8_t* Socks5Client::write_connect(uint8_t* p) const {
  const uint8_t head[] = {kVersion, static_cast<uint8_t>(command_), 0};
  p = put(p, head, sizeof head);
  if (dst_.v6.sin6_family == AF_INET6) {
    *p++ = kAtypV6;
    p = put(p, &dst_.v6.sin6_addr, 16);
    return put(p, &dst_.v6.sin6_port, 2);
  }
  *p++ = kAtypV4;
  p = put(p, &dst_.v4.sin_addr, 4);
  return put(p, &dst_.v4.sin_port, 2);
}

size_t Socks5Client::write_output(uint8_t* buf) const {
  uint8_t* p = buf;
  switch (state_) {
    case State::greeting:
      p = write_greeting(p);
      if (pipelined_) {
        if (!creds_.username.empty()) p = write_auth(p);
        p = write_connect(p);
      }
      break;
    case State::auth: p = write_auth(p); break;
    case State::connect: p = write_connect(p); break;
    default: break;
  }
  return static_cast<size_t>(p - buf);
}

bool Socks5Client::connect_answered() const {
  return state_ == State::done ||
         (failure_ >= Socks5Failure::general_failure && failure_ <= Socks5Failure::unknown_reply_code);
}

size_t Socks5Client::bytes_wanted() const {
  if (state_ == State::done || state_ == State::failed) return 0;
  return static_cast<size_t>(need_ - have_);
}

Socks5Bound Socks5Client::bound() const {
  Socks5Bound b;
  if (state_ != State::done) return b;
  switch (head_[3]) {
    case kAtypV4:
      b.address.v4.sin_family = AF_INET;
      std::memcpy(&b.address.v4.sin_addr, head_ + 4, 4);
      std::memcpy(&b.address.v4.sin_port, head_ + 8, 2);
      break;
    case kAtypV6:
      b.address.v6.sin6_family = AF_INET6;
      std::memcpy(&b.address.v6.sin6_addr, head_ + 4, 16);
      std::memcpy(&b.address.v6.sin6_port, head_ + 20, 2);
      break;
    default: b.is_domain = true; break;
  }
  return b;
}

void Socks5Client::fail(Socks5Failure f) {
  failure_ = f;
  state_ = State::failed;
}

size_t Socks5Client::feed(const uint8_t* data, size_t len) {
  size_t used = 0;
  while (used < len && (state_ == State::greeting || state_ == State::auth || state_ == State::connect)) {
    size_t take = std::min<size_t>(need_ - have_, len - used);
    for (size_t i = 0; i < take && have_ + i < sizeof head_; ++i) head_[have_ + i] = data[used + i];
    have_ = static_cast<uint16_t>(have_ + take);
    used += take;
    // A CONNECT reply's length is known from its ATYP (4th byte) and, for a
    // domain, the 5th.
    if (state_ == State::connect && have_ == 5 && need_ == 5) {
      if (head_[1] != 0 || head_[0] != kVersion) {
        on_message();
        break;
      }
      switch (head_[3]) {
        case kAtypV4: need_ = 4 + 4 + 2; break;
        case kAtypV6: need_ = 4 + 16 + 2; break;
        case kAtypDomain: need_ = static_cast<uint16_t>(4 + 1 + head_[4] + 2); break;
        default: on_message(); return used;
      }
    }
    if (have_ == need_) {
      on_message();
      // Not past a reply whose next request is still to be sent: a server that
      // answers ahead (a CONNECT reply before the CONNECT) must not end the exchange
      // with the request unsent and the tunnel's first bytes then read as it.
      if (output_due_) break;
    }
  }
  return used;
}

void Socks5Client::on_message() {
  const State s = state_;
  have_ = 0;
  need_ = 2;
  if (head_[0] != (s == State::auth ? kAuthVersion : kVersion)) {
    return fail(s == State::auth ? Socks5Failure::malformed_reply : Socks5Failure::bad_version);
  }
  switch (s) {
    case State::greeting:
      if (head_[1] == kMethodNoAuth && creds_.username.empty()) {
        state_ = State::connect;
      } else if (head_[1] == kMethodUserPass && !creds_.username.empty()) {
        state_ = State::auth;
      } else {
        return fail(Socks5Failure::no_acceptable_method);
      }
      output_due_ = !pipelined_;  // pipelined: the next request went with the greeting
      if (state_ == State::connect) need_ = 5;
      return;
    case State::auth:
      if (head_[1] != 0) return fail(Socks5Failure::auth_failed);
      state_ = State::connect;
      need_ = 5;
      output_due_ = !pipelined_;
      return;
    case State::connect: {
      const uint8_t rep = head_[1];
      if (rep >= 1 && rep <= 8) return fail(static_cast<Socks5Failure>(rep));
      if (rep != 0) return fail(Socks5Failure::unknown_reply_code);
      if (head_[2] != 0 || (head_[3] != kAtypV4 && head_[3] != kAtypV6 && head_[3] != kAtypDomain))
        return fail(Socks5Failure::malformed_reply);
      state_ = State::done;
      return;
    }
    default: return;
  }
}

}  // namespace kib::relay
