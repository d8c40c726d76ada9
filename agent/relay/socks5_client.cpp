#include "agent/relay/socks5_client.h"

#include <netinet/in.h>

#include <cstring>

namespace kib::relay {

namespace {
constexpr uint8_t kVersion = 5;
constexpr uint8_t kMethodNoAuth = 0x00;
constexpr uint8_t kMethodUserPass = 0x02;
constexpr uint8_t kAuthVersion = 1;
constexpr uint8_t kCmdConnect = 1;
constexpr uint8_t kAtypV4 = 1;
constexpr uint8_t kAtypDomain = 3;
constexpr uint8_t kAtypV6 = 4;
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

Socks5Client::Socks5Client(const Socks5Credentials& creds, const sockaddr* dst) : creds_(creds) {
  std::memcpy(&dst_, dst, dst->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
}

void Socks5Client::put(const void* p, size_t n) {
  std::memcpy(out_.data() + out_len_, p, n);
  out_len_ += n;
}

std::string_view Socks5Client::start() {
  out_len_ = 0;
  if (creds_.username.empty()) {
    const uint8_t g[] = {kVersion, 1, kMethodNoAuth};
    put(g, sizeof g);
  } else {
    // Offer only user/password: a server accepting no-auth would skip the
    // credentials the operator configured.
    const uint8_t g[] = {kVersion, 1, kMethodUserPass};
    put(g, sizeof g);
  }
  return pending_output();
}

void Socks5Client::build_auth() {
  const uint8_t ulen = static_cast<uint8_t>(creds_.username.size());
  const uint8_t plen = static_cast<uint8_t>(creds_.password.size());
  put(&kAuthVersion, 1);
  put(&ulen, 1);
  put(creds_.username.data(), ulen);
  put(&plen, 1);
  put(creds_.password.data(), plen);
}

void Socks5Client::build_connect() {
  const uint8_t head[] = {kVersion, kCmdConnect, 0};
  put(head, sizeof head);
  if (dst_.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&dst_);
    put(&kAtypV6, 1);
    put(&a->sin6_addr, 16);
    put(&a->sin6_port, 2);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&dst_);
    put(&kAtypV4, 1);
    put(&a->sin_addr, 4);
    put(&a->sin_port, 2);
  }
}

// Bytes the current message needs, given what has arrived so far.
size_t Socks5Client::need_for_state() const {
  switch (state_) {
    case State::greeting:
    case State::auth: return 2;
    case State::connect: {
      if (in_len_ < 5) return 5;
      switch (in_[3]) {
        case kAtypV4: return 4 + 4 + 2;
        case kAtypV6: return 4 + 16 + 2;
        case kAtypDomain: return 4 + 1 + in_[4] + 2;
        default: return 5;  // malformed; judged in on_message
      }
    }
    default: return 0;
  }
}

void Socks5Client::fail(Socks5Failure f) {
  failure_ = f;
  state_ = State::failed;
}

size_t Socks5Client::feed(const uint8_t* data, size_t len) {
  size_t used = 0;
  while (used < len && (state_ == State::greeting || state_ == State::auth || state_ == State::connect)) {
    size_t need = need_for_state();
    size_t take = std::min(need - in_len_, len - used);
    std::memcpy(in_.data() + in_len_, data + used, take);
    in_len_ += take;
    used += take;
    // A CONNECT reply's length is known only after its 5th byte: recompute.
    if (state_ == State::connect && in_len_ == 5 && in_[3] != kAtypV4 && in_[3] != kAtypV6 &&
        in_[3] != kAtypDomain) {
      on_message();
      break;
    }
    if (in_len_ == need_for_state()) on_message();
  }
  return used;
}

void Socks5Client::on_message() {
  const State s = state_;
  in_len_ = 0;
  if (in_[0] != (s == State::auth ? kAuthVersion : kVersion)) {
    return fail(s == State::auth ? Socks5Failure::malformed_reply : Socks5Failure::bad_version);
  }
  switch (s) {
    case State::greeting:
      if (in_[1] == kMethodNoAuth && creds_.username.empty()) {
        state_ = State::connect;
        build_connect();
      } else if (in_[1] == kMethodUserPass && !creds_.username.empty()) {
        state_ = State::auth;
        build_auth();
      } else {
        fail(Socks5Failure::no_acceptable_method);
      }
      return;
    case State::auth:
      if (in_[1] != 0) return fail(Socks5Failure::auth_failed);
      state_ = State::connect;
      build_connect();
      return;
    case State::connect: {
      const uint8_t rep = in_[1];
      if (rep >= 1 && rep <= 8) return fail(static_cast<Socks5Failure>(rep));
      if (rep != 0) return fail(Socks5Failure::unknown_reply_code);
      if (in_[2] != 0 || (in_[3] != kAtypV4 && in_[3] != kAtypV6 && in_[3] != kAtypDomain))
        return fail(Socks5Failure::malformed_reply);
      state_ = State::done;
      return;
    }
    default: return;
  }
}

}  // namespace kib::relay
