#include "agent/dns/socks5_udp_associate.h"

#include <string>

namespace kib::dns {
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

Result<SocketAddress> relay_address_from_reply(const Socks5Reply& reply, const SocketAddress& endpoint,
                                               const policy::EndpointAddressPolicy& address_policy) {
  if (reply.rep != 0)
    return make_error(Code::unavailable, "SOCKS5 UDP ASSOCIATE refused: " + std::string(socks5_reply_text(reply.rep)));
  const auto* ip = std::get_if<policy::IpAddress>(&reply.bound.host);
  if (ip == nullptr) return make_error(Code::unavailable, "SOCKS5 UDP ASSOCIATE reply names a domain as relay address");
  if (reply.bound.port == 0) return make_error(Code::unavailable, "SOCKS5 UDP ASSOCIATE reply has relay port 0");
  SocketAddress relay = SocketAddress::from(*ip, reply.bound.port);
  // "an unspecified BND.ADDR such as 0.0.0.0 means the endpoint's own address"
  if (relay.is_unspecified()) relay = SocketAddress::from(endpoint.ip(), reply.bound.port);
  if (auto st = address_policy.check(relay.ip()); !st)
    return make_error(Code::unavailable, "SOCKS5 relay address refused: " + st.error().message);
  return relay;
}

}  // namespace kib::dns
