#include "agent/dns/socks5_udp_associate.h"

#include <algorithm>
#include <string>

namespace kib::dns {
namespace {

constexpr size_t kMaxReplySize = 4 + 1 + 255 + 2;

}  // namespace

Bytes encode_udp_associate_request(const SocketAddress& client_udp_source) {
  Bytes out{kSocks5Version, kCmdUdpAssociate, 0};
  append_socks5_address(out, client_udp_source);
  return out;
}

std::string_view socks5_reply_text(uint8_t rep) {
  switch (rep) {
    case 0: return "succeeded";
    case 1: return "general SOCKS server failure";
    case 2: return "connection not allowed by ruleset";
    case 3: return "network unreachable";
    case 4: return "host unreachable";
    case 5: return "connection refused";
    case 6: return "TTL expired";
    case 7: return "command not supported";
    case 8: return "address type not supported";
    default: return "unassigned reply code";
  }
}

Result<std::optional<Socks5Reply>> Socks5ReplyReader::feed(ByteView bytes) {
  using Maybe = std::optional<Socks5Reply>;
  // Only take what can belong to the reply; the caller keeps the rest.
  const size_t before = buf_.size();
  const size_t taken = std::min(kMaxReplySize - before, bytes.size());
  buf_.insert(buf_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(taken));
  if (buf_.size() >= 1 && buf_[0] != kSocks5Version)
    return make_error(Code::unavailable, "SOCKS5 reply with version " + std::to_string(buf_[0]));
  if (buf_.size() < 4) {
    consumed_ = taken;
    return Maybe{};
  }
  auto addr = decode_socks5_address(ByteView(buf_).subspan(3));
  if (!addr) return make_error(Code::unavailable, "SOCKS5 reply: " + addr.error().message);
  if (!addr->has_value()) {
    consumed_ = taken;
    return Maybe{};
  }
  const size_t total = 3 + (*addr)->size;
  consumed_ = total - before;
  return Maybe(Socks5Reply{buf_[1], std::move((*addr)->destination)});
}

Result<SocketAddress> relay_address_from_reply(const Socks5Reply& reply, const SocketAddress& endpoint,
                                               const policy::EndpointAddressPolicy& address_policy) {
  if (reply.rep != 0)
    return make_error(Code::unavailable,
                      "SOCKS5 UDP ASSOCIATE refused: " + std::string(socks5_reply_text(reply.rep)));
  const auto* ip = std::get_if<policy::IpAddress>(&reply.bound.host);
  if (ip == nullptr)
    return make_error(Code::unavailable, "SOCKS5 UDP ASSOCIATE reply names a domain as relay address");
  if (reply.bound.port == 0)
    return make_error(Code::unavailable, "SOCKS5 UDP ASSOCIATE reply has relay port 0");
  SocketAddress relay{*ip, reply.bound.port};
  // "an unspecified BND.ADDR such as 0.0.0.0 means the endpoint's own address"
  if (relay.is_unspecified()) relay.ip = endpoint.ip;
  if (auto st = address_policy.check(relay.ip); !st)
    return make_error(Code::unavailable, "SOCKS5 relay address refused: " + st.error().message);
  return relay;
}

}  // namespace kib::dns
