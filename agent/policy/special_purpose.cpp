// Sources (checked 2026-12):
//   IANA IPv4 Special-Purpose Address Registry,
//     https://www.iana.org/assignments/iana-ipv4-special-registry/
//   IANA IPv6 Special-Purpose Address Registry,
//     https://www.iana.org/assignments/iana-ipv6-special-registry/
//   RFC 6890 (the registries' structure), RFC 8190, RFC 9637 (3fff::/20), RFC 9602
//   (5f00::/16), RFC 9780 (100:0:0:1::/64), RFC 8155 (192.0.0.0/24 entries),
//   and /work/shared/API.md, which adds IPv4 multicast 224.0.0.0/4, IPv6 multicast
//   ff00::/8, deprecated site-local fec0::/10 and IPv4-compatible ::/96.
//
// Every registry entry is refused, including those IANA marks "globally reachable"
// (192.31.196.0/24 AS112, 192.175.48.0/24 AS112 direct delegation, 2001:4:112::/48,
// 2620:4f:8000::/48, 2001:20::/28 ORCHIDv2, ...): API.md refuses "the IANA IPv4 and
// IPv6 special-purpose registries", not only their non-global part, and no Egress
// has a reason to live on an AS112 sink or a protocol anycast address.
#include "agent/policy/special_purpose.h"

#include <cstdlib>

namespace kib::policy {
namespace {

struct RawBlock {
  const char* cidr;
  const char* name;
};

// Registry order; nested blocks (192.0.0.0/29 inside 192.0.0.0/24, the 2001::/23
// sub-blocks) are listed too, so the error names the most specific one.
constexpr RawBlock kRegistry[] = {
    // IPv4
    {"0.0.0.0/8", "\"this network\" (RFC 791)"},
    {"0.0.0.0/32", "\"this host on this network\" (RFC 1122)"},
    {"10.0.0.0/8", "private-use (RFC 1918)"},
    {"100.64.0.0/10", "shared address space (RFC 6598)"},
    {"127.0.0.0/8", "loopback (RFC 1122)"},
    {"169.254.0.0/16", "link local (RFC 3927)"},
    {"172.16.0.0/12", "private-use (RFC 1918)"},
    {"192.0.0.0/24", "IETF protocol assignments (RFC 6890)"},
    {"192.0.0.0/29", "IPv4 service continuity prefix (RFC 7335)"},
    {"192.0.0.8/32", "IPv4 dummy address (RFC 7600)"},
    {"192.0.0.9/32", "port control protocol anycast (RFC 7723)"},
    {"192.0.0.10/32", "traversal using relays around NAT anycast (RFC 8155)"},
    {"192.0.0.170/32", "NAT64/DNS64 discovery (RFC 8880)"},
    {"192.0.0.171/32", "NAT64/DNS64 discovery (RFC 8880)"},
    {"192.0.2.0/24", "documentation TEST-NET-1 (RFC 5737)"},
    {"192.31.196.0/24", "AS112-v4 (RFC 7535)"},
    {"192.52.193.0/24", "AMT (RFC 7450)"},
    {"192.88.99.0/24", "deprecated 6to4 relay anycast (RFC 7526)"},
    {"192.168.0.0/16", "private-use (RFC 1918)"},
    {"192.175.48.0/24", "direct delegation AS112 service (RFC 7534)"},
    {"198.18.0.0/15", "benchmarking (RFC 2544)"},
    {"198.51.100.0/24", "documentation TEST-NET-2 (RFC 5737)"},
    {"203.0.113.0/24", "documentation TEST-NET-3 (RFC 5737)"},
    {"224.0.0.0/4", "multicast (RFC 5771)"},
    {"240.0.0.0/4", "reserved (RFC 1112)"},
    {"255.255.255.255/32", "limited broadcast (RFC 919)"},
    // IPv6
    {"::1/128", "loopback (RFC 4291)"},
    {"::/128", "unspecified (RFC 4291)"},
    {"::/96", "deprecated IPv4-compatible (RFC 4291)"},
    {"::ffff:0:0/96", "IPv4-mapped (RFC 4291)"},
    {"64:ff9b::/96", "IPv4-IPv6 translation (RFC 6052)"},
    {"64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"},
    {"100::/64", "discard-only (RFC 6666)"},
    {"100:0:0:1::/64", "dummy IPv6 prefix (RFC 9780)"},
    {"2001::/23", "IETF protocol assignments (RFC 2928)"},
    {"2001::/32", "TEREDO (RFC 4380)"},
    {"2001:1::1/128", "port control protocol anycast (RFC 7723)"},
    {"2001:1::2/128", "traversal using relays around NAT anycast (RFC 8155)"},
    {"2001:1::3/128", "DNS-SD service registration protocol anycast (RFC 9665)"},
    {"2001:2::/48", "benchmarking (RFC 5180)"},
    {"2001:3::/32", "AMT (RFC 7450)"},
    {"2001:4:112::/48", "AS112-v6 (RFC 7535)"},
    {"2001:10::/28", "deprecated ORCHID (RFC 4843)"},
    {"2001:20::/28", "ORCHIDv2 (RFC 7343)"},
    {"2001:30::/28", "drone remote ID protocol entity tags (RFC 9374)"},
    {"2001:db8::/32", "documentation (RFC 3849)"},
    {"2002::/16", "6to4 (RFC 3056)"},
    {"2620:4f:8000::/48", "direct delegation AS112 service (RFC 7534)"},
    {"3fff::/20", "documentation (RFC 9637)"},
    {"5f00::/16", "segment routing SIDs (RFC 9602)"},
    {"fc00::/7", "unique-local (RFC 4193)"},
    {"fe80::/10", "link-local unicast (RFC 4291)"},
    {"fec0::/10", "deprecated site-local (RFC 3879)"},
    {"ff00::/8", "multicast (RFC 4291)"},
};

Cidr must_parse(const char* text) {
  auto c = Cidr::parse(text);
  if (!c.ok()) std::abort();  // constant input: a bug
  return *c;
}

std::vector<SpecialPurposeBlock> build_table() {
  std::vector<SpecialPurposeBlock> table;
  // A typo in the constant table aborts at first use: a bug the unit tests catch.
  for (const auto& raw : kRegistry) table.push_back({must_parse(raw.cidr), raw.name});
  return table;
}

bool in_any(const std::vector<Cidr>& cidrs, const IpAddress& a) {
  for (const auto& c : cidrs)
    if (c.contains(a)) return true;
  return false;
}

// The IPv4 address embedded at the end of an IPv4-mapped (::ffff:0:0/96) or NAT64
// well-known-prefix (64:ff9b::/96, RFC 6052) IPv6 address. The IPv4-compatible form
// (::/96) is deprecated (RFC 4291 2.5.5.1) and API.md lists ::/96 itself as refused,
// so it is not unwrapped: it is refused as a block whatever IPv4 it carries (and
// ::1 is then reported as loopback, not as 0.0.0.1).
std::optional<IpAddress> embedded_v4(const IpAddress& a) {
  static const Cidr mapped = must_parse("::ffff:0:0/96");
  static const Cidr nat64 = must_parse("64:ff9b::/96");
  if (!mapped.contains(a) && !nat64.contains(a)) return std::nullopt;
  IpAddress v4;
  v4.family = AF_INET;
  for (size_t i = 0; i < 4; ++i) v4.bytes[i] = a.bytes[12 + i];
  return v4;
}

}  // namespace

const std::vector<SpecialPurposeBlock>& special_purpose_table() {
  static const std::vector<SpecialPurposeBlock> table = build_table();
  return table;
}

const SpecialPurposeBlock* find_special_purpose_block(const IpAddress& a) {
  const SpecialPurposeBlock* best = nullptr;
  for (const auto& b : special_purpose_table())
    if (b.cidr.contains(a) && (best == nullptr || b.cidr.prefix_len > best->cidr.prefix_len)) best = &b;
  return best;
}

EndpointAddressPolicy::EndpointAddressPolicy(std::vector<Cidr> exemptions) : exemptions_(std::move(exemptions)) {}

Result<EndpointAddressPolicy> EndpointAddressPolicy::from_strings(const std::vector<std::string>& cidrs) {
  std::vector<Cidr> parsed;
  for (const auto& s : cidrs) {
    KIB_TRY_ASSIGN(auto c, Cidr::parse(s));
    parsed.push_back(c);
  }
  return EndpointAddressPolicy(std::move(parsed));
}

namespace {
// What an operator can do about a refusal, said where it is reported.
constexpr std::string_view kHowToAllow = "; an operator may allow it with egress.allowed_special_purpose_cidrs";
}  // namespace

Status EndpointAddressPolicy::check(const IpAddress& a) const {
  if (in_any(exemptions_, a)) return {};
  const std::string shown = a.to_string();
  if (auto v4 = embedded_v4(a)) {
    // "IPv4 embedded in IPv6 is unwrapped and classified as IPv4" (API.md): the
    // exemptions and the table apply to the IPv4 address the packet would reach.
    if (in_any(exemptions_, *v4)) return {};
    if (const auto* b = find_special_purpose_block(*v4))
      return make_error(Code::invalid_argument, "address " + shown + " embeds " + v4->to_string() +
                                                    ", which is in the special-purpose block " + b->cidr.to_string() +
                                                    " (" + b->name + ")" + std::string(kHowToAllow));
    return {};
  }
  // 64:ff9b:1::/48, 2002::/16 (6to4) and 2001::/32 (Teredo) are in the table and
  // refused outright: their embedded IPv4 address is not a reason to let them pass.
  if (const auto* b = find_special_purpose_block(a))
    return make_error(Code::invalid_argument, "address " + shown + " is in the special-purpose block " +
                                                  b->cidr.to_string() + " (" + b->name + ")" +
                                                  std::string(kHowToAllow));
  return {};
}

}  // namespace kib::policy
