#include "agent/dns/socks5_udp_header.h"

#include <cstring>

namespace kib::dns {

void append_socks5_address(Bytes& out, const SocketAddress& a) {
  const policy::IpAddress ip = a.ip();
  const bool v6 = ip.family == AF_INET6;
  out.push_back(v6 ? kAtypIpv6 : kAtypIpv4);
  out.insert(out.end(), ip.bytes.begin(), ip.bytes.begin() + (v6 ? 16 : 4));
  const uint16_t port = a.port();
  out.push_back(static_cast<uint8_t>(port >> 8));
  out.push_back(static_cast<uint8_t>(port & 0xff));
}

Result<std::optional<DecodedSocks5Address>> decode_socks5_address(ByteView in) {
  using Maybe = std::optional<DecodedSocks5Address>;
  if (in.empty()) return Maybe{};
  DecodedSocks5Address out;
  size_t addr_len = 0;
  size_t addr_at = 1;
  switch (in[0]) {
    case kAtypIpv4: addr_len = 4; break;
    case kAtypIpv6: addr_len = 16; break;
    case kAtypDomain:
      if (in.size() < 2) return Maybe{};
      addr_len = in[1];
      addr_at = 2;
      if (addr_len == 0) return make_error(Code::invalid_argument, "SOCKS5 address: empty domain name");
      break;
    default: return make_error(Code::invalid_argument, "SOCKS5 address: unknown ATYP " + std::to_string(in[0]));
  }
  const size_t total = addr_at + addr_len + 2;
  if (in.size() < total) return Maybe{};
  if (in[0] == kAtypDomain) {
    out.destination.host = std::string(reinterpret_cast<const char*>(in.data() + addr_at), addr_len);
  } else {
    policy::IpAddress ip;
    ip.family = in[0] == kAtypIpv6 ? AF_INET6 : AF_INET;
    std::memcpy(ip.bytes.data(), in.data() + addr_at, addr_len);
    out.destination.host = ip;
  }
  out.destination.port = static_cast<uint16_t>(in[total - 2] << 8 | in[total - 1]);
  out.size = total;
  return Maybe(std::move(out));
}

void append_socks5_udp_datagram(Bytes& out, const SocketAddress& dst, ByteView payload) {
  out.push_back(0);  // RSV
  out.push_back(0);
  out.push_back(0);  // FRAG: standalone datagram
  append_socks5_address(out, dst);
  out.insert(out.end(), payload.begin(), payload.end());
}

Result<Socks5UdpDatagram> decode_socks5_udp_datagram(ByteView d) {
  if (d.size() < 4) return make_error(Code::invalid_argument, "SOCKS5 UDP datagram shorter than its header");
  if (d[2] != 0) return make_error(Code::failed_precondition, "SOCKS5 UDP fragment dropped (FRAG != 0)");
  KIB_TRY_ASSIGN(auto addr, decode_socks5_address(d.subspan(3)));
  if (!addr.has_value()) return make_error(Code::invalid_argument, "SOCKS5 UDP datagram header truncated");
  Socks5UdpDatagram out;
  out.destination = std::move(addr->destination);
  out.payload = d.subspan(3 + addr->size);
  return out;
}

}  // namespace kib::dns
