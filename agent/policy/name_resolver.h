#pragma once
// Name resolution through c-ares: the endpoint check at create/update time and the
// resolution on every dial use it. Never the libc resolver (it blocks without a
// bound).
#include <chrono>
#include <string>
#include <vector>

#include "agent/policy/ip_address.h"

namespace kib::policy {

struct ResolverOptions {
  // "ip" or "ip:port" (IPv6 in brackets with a port); empty = /etc/resolv.conf.
  std::vector<std::string> servers;
  std::chrono::milliseconds timeout{2000};
};

// Resolves A and AAAA for host, blocking the calling thread for at most
// options.timeout. An empty vector means "does not resolve" (NXDOMAIN, no data,
// timeout); an Error means the resolver itself could not run.
Result<std::vector<IpAddress>> resolve_host(const std::string& host, const ResolverOptions& options);

// invalid_argument when a server string is malformed (at most 8 servers) or the
// timeout is not positive: for the daemon to check its config once at start.
Status validate_resolver_options(const ResolverOptions& options);

}  // namespace kib::policy
