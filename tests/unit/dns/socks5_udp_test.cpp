#include <doctest/doctest.h>

#include "agent/dns/socks5_udp_associate.h"
#include "agent/dns/socks5_udp_header.h"

using namespace kib::dns;
using kib::policy::IpAddress;

namespace {

SocketAddress addr(const char* ip, uint16_t port) { return SocketAddress::from(*IpAddress::parse(ip), port); }

kib::policy::EndpointAddressPolicy lab_policy() {
  return *kib::policy::EndpointAddressPolicy::from_strings({"10.0.0.0/8", "fd00::/8"});
}

}  // namespace

TEST_CASE("an IPv4 datagram header is RSV FRAG ATYP=1 ADDR PORT then the data") {
  const uint8_t payload[] = {0xde, 0xad};
  Bytes out;
  append_socks5_udp_datagram(out, addr("192.0.2.1", 53), payload);
  const Bytes want = {0, 0, 0, 1, 192, 0, 2, 1, 0, 53, 0xde, 0xad};
  CHECK(out == want);
}

TEST_CASE("an IPv6 datagram header uses ATYP=4 and round-trips") {
  const uint8_t payload[] = {1, 2, 3};
  Bytes out;
  append_socks5_udp_datagram(out, addr("2001:db8::5", 5353), payload);
  CHECK(out.size() == 3 + 1 + 16 + 2 + 3);
  CHECK(out[3] == kAtypIpv6);
  auto d = decode_socks5_udp_datagram(out);
  REQUIRE(d.ok());
  CHECK(std::get<IpAddress>(d->destination.host) == *IpAddress::parse("2001:db8::5"));
  CHECK(d->destination.port == 5353);
  CHECK(Bytes(d->payload.begin(), d->payload.end()) == Bytes{1, 2, 3});
}

TEST_CASE("a datagram with a domain name (ATYP=3) decodes") {
  const Bytes in = {0, 0, 0, 3, 4, 'd', 'n', 's', '1', 0, 53, 0xaa};
  auto d = decode_socks5_udp_datagram(in);
  REQUIRE(d.ok());
  CHECK(std::get<std::string>(d->destination.host) == "dns1");
  CHECK(d->destination.port == 53);
  CHECK(d->payload.size() == 1);
}

TEST_CASE("a fragmented datagram (FRAG != 0) is dropped") {
  const Bytes in = {0, 0, 1, 1, 192, 0, 2, 1, 0, 53, 0xaa};
  auto d = decode_socks5_udp_datagram(in);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == kib::Code::failed_precondition);
}

TEST_CASE("truncated headers and unknown address types are invalid") {
  CHECK_FALSE(decode_socks5_udp_datagram(Bytes{0, 0, 0}).ok());
  CHECK_FALSE(decode_socks5_udp_datagram(Bytes{0, 0, 0, 1, 192, 0, 2}).ok());
  CHECK_FALSE(decode_socks5_udp_datagram(Bytes{0, 0, 0, 4, 0, 0, 0, 0}).ok());
  CHECK_FALSE(decode_socks5_udp_datagram(Bytes{0, 0, 0, 2, 1, 2, 3, 4, 0, 53}).ok());
  CHECK_FALSE(decode_socks5_udp_datagram(Bytes{0, 0, 0, 3, 0, 0, 53}).ok());
}

TEST_CASE("the relay address is BND.ADDR:BND.PORT") {
  Socks5Reply reply{0, {*IpAddress::parse("10.0.0.9"), 40000}};
  auto relay = relay_address_from_reply(reply, addr("10.0.0.1", 1080), lab_policy());
  REQUIRE(relay.ok());
  CHECK(*relay == addr("10.0.0.9", 40000));
}

TEST_CASE("an unspecified BND.ADDR means the endpoint's own address") {
  Socks5Reply v4{0, {*IpAddress::parse("0.0.0.0"), 40000}};
  auto relay = relay_address_from_reply(v4, addr("10.0.0.1", 1080), lab_policy());
  REQUIRE(relay.ok());
  CHECK(*relay == addr("10.0.0.1", 40000));
  Socks5Reply v6{0, {*IpAddress::parse("::"), 40001}};
  relay = relay_address_from_reply(v6, addr("fd00::1", 1080), lab_policy());
  REQUIRE(relay.ok());
  CHECK(*relay == addr("fd00::1", 40001));
}

TEST_CASE("the relay address must pass the special-purpose check") {
  Socks5Reply reply{0, {*IpAddress::parse("127.0.0.1"), 40000}};
  auto relay = relay_address_from_reply(reply, addr("10.0.0.1", 1080), lab_policy());
  REQUIRE_FALSE(relay.ok());
  CHECK(relay.error().code == kib::Code::unavailable);
  Socks5Reply unspecified{0, {*IpAddress::parse("0.0.0.0"), 40000}};
  kib::policy::EndpointAddressPolicy strict;
  CHECK_FALSE(relay_address_from_reply(unspecified, addr("10.0.0.1", 1080), strict).ok());
}

TEST_CASE("a refused ASSOCIATE names the reply code") {
  Socks5Reply reply{7, {*IpAddress::parse("0.0.0.0"), 0}};
  auto relay = relay_address_from_reply(reply, addr("10.0.0.1", 1080), lab_policy());
  REQUIRE_FALSE(relay.ok());
  CHECK(relay.error().message.find("command not supported") != std::string::npos);
}

TEST_CASE("a domain or port 0 as relay address is refused") {
  Socks5Reply domain{0, {std::string("relay.example"), 40000}};
  CHECK_FALSE(relay_address_from_reply(domain, addr("10.0.0.1", 1080), lab_policy()).ok());
  Socks5Reply port0{0, {*IpAddress::parse("10.0.0.9"), 0}};
  CHECK_FALSE(relay_address_from_reply(port0, addr("10.0.0.1", 1080), lab_policy()).ok());
}
