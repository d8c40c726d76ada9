#pragma once
// The header SOCKS5 puts in front of every relayed UDP datagram (RFC 1928 section 7):
//   RSV(2) FRAG(1) ATYP(1) DST.ADDR DST.PORT(2) DATA
// Fragmentation is optional in the RFC and we never use it: a datagram with FRAG != 0
// is dropped ("an implementation that does not support fragmentation MUST drop any
// datagram whose FRAG field is other than X'00'").
#include <cstdint>
#include <string>
#include <variant>

#include "agent/dns/dns_message.h"
#include "agent/dns/socket_address.h"

namespace kib::dns {

constexpr uint8_t kAtypIpv4 = 1;
constexpr uint8_t kAtypDomain = 3;
constexpr uint8_t kAtypIpv6 = 4;

// The header's DST: an address (ATYP 1 or 4) or a domain name (ATYP 3) with a port.
struct Socks5Destination {
  std::variant<policy::IpAddress, std::string> host;
  uint16_t port = 0;
};

struct Socks5UdpDatagram {
  Socks5Destination destination;
  ByteView payload;  // points into the decoded buffer
};

// Appends the header for dst (ATYP 1 or 4 by family) and the payload to out.
void append_socks5_udp_datagram(Bytes& out, const SocketAddress& dst, ByteView payload);

// Decodes a datagram received from the relay. invalid_argument for a truncated
// header, an unknown ATYP, an empty domain; failed_precondition for FRAG != 0.
Result<Socks5UdpDatagram> decode_socks5_udp_datagram(ByteView datagram);

// Appends ATYP, ADDR and PORT for an address (shared with the ASSOCIATE request).
void append_socks5_address(Bytes& out, const SocketAddress& a);

// Decodes ATYP ADDR PORT at the start of in. Returns the destination and how many
// bytes it took, nullopt when in is too short to tell (a partial read).
struct DecodedSocks5Address {
  Socks5Destination destination;
  size_t size = 0;
};
Result<std::optional<DecodedSocks5Address>> decode_socks5_address(ByteView in);

}  // namespace kib::dns
