// Fuzz target for the parsers that read client input: parse_host_port,
// parse_ip_port, IpAddress::parse, Cidr::parse, and the special-purpose check.
// Each accepted input must round-trip through its printed form; any broken
// invariant aborts. Built and run as every fuzz target is (tests/fuzz/meson.build).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/policy/endpoint.h"
#include "agent/policy/ip_address.h"
#include "agent/policy/special_purpose.h"

namespace {

using namespace kib::policy;

void require(bool ok) {
  if (!ok) std::abort();
}

void check_address(std::string_view text) {
  auto a = IpAddress::parse(text);
  if (!a.ok()) return;
  auto again = IpAddress::parse(a->to_string());
  require(again.ok() && *again == *a);
  static const EndpointAddressPolicy policy;
  const bool allowed = policy.check(*a).ok();
  // A mapped address is judged exactly like the IPv4 address it carries.
  const IpAddress v4 = unmap_v4(*a);
  if (!(v4 == *a)) require(allowed == policy.check(v4).ok());
}

void check_cidr(std::string_view text) {
  auto c = Cidr::parse(text);
  if (!c.ok()) return;
  require(c->prefix_len <= c->base.bit_length());
  require(c->contains(c->base));
  auto again = Cidr::parse(c->to_string());
  require(again.ok() && again->base == c->base && again->prefix_len == c->prefix_len);
}

void check_host_port(std::string_view text) {
  auto hp = parse_host_port(text);
  auto ipp = parse_ip_port(text);
  if (ipp.ok()) require(hp.ok() && ipp->ip.has_value());
  if (!hp.ok()) return;
  require(hp->port >= 1 && !hp->host.empty() && hp->host.size() <= 253);
  const std::string printed =
      (hp->ip && hp->ip->family == AF_INET6 ? "[" + hp->host + "]" : hp->host) + ":" + std::to_string(hp->port);
  auto again = parse_host_port(printed);
  require(again.ok() && again->host == hp->host && again->port == hp->port && again->ip == hp->ip);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_address(text);
  check_cidr(text);
  check_host_port(text);
  return 0;
}
