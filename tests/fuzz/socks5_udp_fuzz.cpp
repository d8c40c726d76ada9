// Fuzz target: what an Egress server's UDP relay sends back (agent/dns/
// socks5_udp_header.cpp): the RFC 1928 section 7 header of every datagram, and the
// ATYP/ADDR/PORT that the ASSOCIATE reply and the header share. Checked beyond not
// crashing: a decoded IP header re-encodes to the same bytes; the address decoder
// gives the same answer for every prefix long enough, and "need more" for every
// shorter one, as a stream read in pieces would see it.
#include <variant>

#include "agent/dns/socks5_udp_header.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace dns = kib::dns;

void check_datagram(dns::ByteView d) {
  auto decoded = dns::decode_socks5_udp_datagram(d);
  if (!decoded.ok()) return;
  require(d.size() >= 4 && d[2] == 0, "only unfragmented datagrams decode");
  const auto& dst = decoded->destination;
  require(decoded->payload.data() + decoded->payload.size() == d.data() + d.size(),
          "the payload is the datagram's tail");
  const auto* ip = std::get_if<kib::policy::IpAddress>(&dst.host);
  if (ip == nullptr) return;  // a domain: nothing of ours re-encodes one
  dns::Bytes again;
  dns::append_socks5_udp_datagram(again, dns::SocketAddress::from(*ip, dst.port), decoded->payload);
  require(again.size() == d.size(), "re-encoded header has the decoded length");
  require(std::equal(again.begin() + 3, again.end(), d.begin() + 3), "re-encoded header has the same bytes");
}

void check_address_prefixes(dns::ByteView in) {
  auto full = dns::decode_socks5_address(in);
  for (size_t n = 0; n <= in.size(); ++n) {
    auto part = dns::decode_socks5_address(in.first(n));
    if (!full.ok()) {
      // The same verdict once the bytes that decide it are in (ATYP, domain length).
      if (!part.ok()) return;
      require(part->has_value() == false, "a prefix of a refused address is never accepted");
      continue;
    }
    require(part.ok(), "a prefix of an accepted address is never refused");
    if (!full->has_value()) {
      require(!part->has_value(), "a prefix of an incomplete address is incomplete");
      continue;
    }
    const auto& f = **full;
    if (n < f.size) {
      require(!part->has_value(), "a prefix shorter than the address wants more");
    } else {
      require(part->has_value() && (*part)->size == f.size && (*part)->destination.port == f.destination.port &&
                  (*part)->destination.host == f.destination.host,
              "every long enough prefix decodes the same address");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dns::ByteView in(data, size);
  check_datagram(in);
  check_address_prefixes(in.first(size < 300 ? size : 300));  // an address is at most 262 bytes
  return 0;
}
