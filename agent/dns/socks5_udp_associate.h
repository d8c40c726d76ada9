#pragma once
// The relay address a UDP ASSOCIATE reply names (RFC 1928 sections 6 and 7). The
// command itself is sent and its reply read by the Egress dial (relay/egress_dial.h).
#include <cstdint>
#include <string_view>

#include "agent/dns/socks5_udp_header.h"
#include "agent/policy/special_purpose.h"

namespace kib::dns {

// The RFC 1928 section 6 reply text for REP, for status and logs.
std::string_view socks5_reply_text(uint8_t rep);

struct Socks5Reply {
  uint8_t rep = 0;
  Socks5Destination bound;  // BND.ADDR, BND.PORT
};

// The association's relay address from a successful reply: BND.ADDR:BND.PORT, where an
// unspecified BND.ADDR (0.0.0.0 or ::) means the endpoint's own address. The result
// must pass the special-purpose check like every address the agent sends to.
// rep != 0 is unavailable naming the reply; a domain BND.ADDR or port 0 is
// unavailable too (we never resolve what a server tells us).
Result<SocketAddress> relay_address_from_reply(const Socks5Reply& reply, const SocketAddress& endpoint,
                                               const policy::EndpointAddressPolicy& address_policy);

}  // namespace kib::dns
