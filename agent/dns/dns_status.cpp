#include "agent/dns/dns_status.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace kib::dns {
namespace {

namespace ctrl = ::kibotos::ctrl::v1;

uint32_t clamp_u32(size_t v) {
  return static_cast<uint32_t>(std::min<size_t>(v, std::numeric_limits<uint32_t>::max()));
}

void fill_resolver(const ResolverState& r, ctrl::DnsResolverStatus& out) {
  out.set_address(r.address);
  out.set_transport(r.tcp ? "tcp" : "udp");
  out.set_egress_id(r.egress_id);
  out.set_state(r.state);
  out.set_relay_address(r.relay_address);
  out.set_egress_revision(r.egress_revision);
  out.set_last_error(r.last_error);
}

void fill_dns(const WorkspaceDnsStatus& s, ctrl::DnsStatus& out) {
  out.set_queries(s.counters.queries);
  out.set_answers(s.counters.answers);
  out.set_timeouts(s.counters.timeouts);
  out.set_failovers(s.counters.failovers);
  out.set_query_bytes(s.counters.query_bytes);
  out.set_answer_bytes(s.counters.answer_bytes);
  auto& failures = *out.mutable_failures();
  for (size_t i = 0; i < kFailureReasonCount; ++i)
    failures[std::string(failure_reason_name(static_cast<FailureReason>(i)))] = s.counters.failures[i];
  out.set_in_flight(clamp_u32(s.in_flight));
  out.set_max_in_flight(clamp_u32(s.max_in_flight));
  for (const auto& r : s.resolvers) fill_resolver(r, *out.add_resolvers());
}

// The policy's Egress entry of a resolver's Egress; an Egress only resolvers use gets
// one too (its applied revision is then what DNS holds, it has no guest connections).
ctrl::EgressStatus& egress_entry(ctrl::NetworkPolicyStatus& status, const ResolverState& r) {
  for (auto& e : *status.mutable_egresses())
    if (e.egress_id() == r.egress_id) return e;
  auto* e = status.add_egresses();
  e->set_egress_id(r.egress_id);
  e->set_applied_revision(r.egress_held);
  return *e;
}

}  // namespace

void add_dns_status(const WorkspaceDnsStatus& dns, ctrl::NetworkPolicyStatus& status) {
  if (dns.resolvers.empty()) return;
  fill_dns(dns, *status.mutable_dns());
  for (const auto& r : dns.resolvers) {
    if (r.egress_id.empty()) continue;
    auto& e = egress_entry(status, r);
    // A revision is applied once DNS and the connections both use it.
    e.set_applied_revision(std::min(e.applied_revision(), r.egress_held));
    if (!r.last_error.empty() && e.last_error().empty())
      e.set_last_error("dns " + resolver_label(r) + ": " + r.last_error);
  }
}

std::string describe_dns_status(const WorkspaceDnsStatus& s) {
  std::string out =
      "dns: queries=" + std::to_string(s.counters.queries) + " answers=" + std::to_string(s.counters.answers) +
      " timeouts=" + std::to_string(s.counters.timeouts) + " failovers=" + std::to_string(s.counters.failovers) +
      " in_flight=" + std::to_string(s.in_flight) + "/" + std::to_string(s.max_in_flight);
  for (size_t i = 0; i < kFailureReasonCount; ++i) {
    if (s.counters.failures[i] == 0) continue;
    out += " failed_" + std::string(failure_reason_name(static_cast<FailureReason>(i))) + "=" +
           std::to_string(s.counters.failures[i]);
  }
  for (const auto& r : s.resolvers) {
    out += "; " + resolver_label(r) + ": " + r.state;
    if (!r.relay_address.empty()) out += " (relay " + r.relay_address + ")";
    if (r.egress_revision != 0) out += " rev " + std::to_string(r.egress_revision);
    if (!r.last_error.empty()) out += " (last error: " + r.last_error + ")";
  }
  return out;
}

}  // namespace kib::dns
