#include "agent/policy/endpoint_check.h"

namespace kib::policy {

Status check_endpoint_address(const HostPort& endpoint, const EndpointAddressPolicy& policy,
                              const HostResolver& resolve) {
  if (endpoint.ip) return policy.check(*endpoint.ip);
  auto resolved = resolve(endpoint.host);
  // A resolver that cannot run counts as a name that does not resolve: the dial
  // resolves and checks again.
  if (!resolved.ok()) return {};
  for (const auto& a : *resolved) {
    auto st = policy.check(a);
    if (!st.ok()) {
      std::string message = "host \"";
      message += endpoint.host;
      message += "\" resolves to a refused address: ";
      message += st.error().message;
      return make_error(Code::invalid_argument, std::move(message));
    }
  }
  return {};
}

Status check_endpoint_address(const HostPort& endpoint, const EndpointAddressPolicy& policy,
                              const ResolverOptions& options) {
  return check_endpoint_address(
      endpoint, policy, HostResolver([&options](const std::string& host) { return resolve_host(host, options); }));
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
