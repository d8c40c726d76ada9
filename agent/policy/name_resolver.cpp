#include "agent/policy/name_resolver.h"

#include <poll.h>

#include <optional>

#include "agent/policy/async_resolver.h"

namespace kib::policy {
namespace {

using Clock = std::chrono::steady_clock;

// One poll() round: wait for the resolver's sockets or its next timer, then let
// c-ares process what happened.
void run_once(AsyncResolver& resolver) {
  const auto wait = resolver.next_timeout().value_or(std::chrono::milliseconds(0));
  std::vector<pollfd> fds;
  for (const auto& s : resolver.sockets())
    fds.push_back({s.fd, static_cast<short>((s.read ? POLLIN : 0) | (s.write ? POLLOUT : 0)), 0});
  const int n = poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (n <= 0) {
    resolver.process_timeouts();
    return;
  }
  for (const auto& p : fds) {
    if (p.revents == 0) continue;
    const bool readable = (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0;
    const bool writable = (p.revents & POLLOUT) != 0;
    resolver.process_fd(readable ? p.fd : -1, writable ? p.fd : -1);
  }
}

}  // namespace

Result<std::vector<IpAddress>> resolve_host(const std::string& host, const ResolverOptions& options) {
  KIB_TRY_ASSIGN(auto resolver, AsyncResolver::create(options));
  std::optional<Result<std::vector<IpAddress>>> outcome;
  resolver->resolve(host, [&outcome](Result<std::vector<IpAddress>> r) { outcome = std::move(r); });
  // The resolver's own deadline ends the lookup; this bound only guards the loop.
  const auto hard_stop = Clock::now() + options.timeout + std::chrono::seconds(1);
  while (!outcome && Clock::now() < hard_stop) run_once(*resolver);
  if (!outcome) return std::vector<IpAddress>{};
  return std::move(*outcome);
}

}  // namespace kib::policy
