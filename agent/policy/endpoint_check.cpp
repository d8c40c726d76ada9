#include "agent/policy/endpoint_check.h"

namespace kib::policy {

Status check_endpoint_address(const HostPort& endpoint, const EndpointAddressPolicy& policy,
                              const ResolverOptions& options) {
  if (endpoint.ip) return policy.check(*endpoint.ip);
  auto resolved = resolve_host(endpoint.host, options);
  if (!resolved.ok()) return std::move(resolved).error();
  for (const auto& a : *resolved) {
    auto st = policy.check(a);
    if (!st.ok())
      return make_error(Code::invalid_argument, "host " + endpoint.host + " resolves to a refused address: " +
                                                    st.error().message);
  }
  return {};
}

DialTargets filter_dial_targets(const std::vector<IpAddress>& resolved, const EndpointAddressPolicy& policy) {
  DialTargets out;
  for (const auto& a : resolved) {
    auto st = policy.check(a);
    if (st.ok())
      out.allowed.push_back(a);
    else
      out.refused.push_back(std::move(st).error());
  }
  return out;
}

}  // namespace kib::policy
