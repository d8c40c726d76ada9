#pragma once
// Everything a dial through one Egress revision needs, built once when the revision
// is published and shared (immutable) by every connection dialing through it.
#include <atomic>
#include <memory>
#include <string>

#include "agent/common/result.h"
#include "agent/policy/endpoint.h"
#include "agent/relay/relay_accounting.h"
#include "agent/relay/socks5_client.h"
#include "agent/relay/tls_context.h"
#include "agent/runtime/runtime.h"

namespace kib::relay {

struct DialTarget {
  EgressRevisionPtr revision;
  policy::HostPort endpoint;
  Socks5Credentials credentials;
  std::shared_ptr<TlsClientContext> tls;  // null: plain TCP
  // Learned after publication, so not part of the immutable rest: whether the SOCKS5
  // server answers requests sent together with the greeting (socks5_pipelining_probe.h).
  // Until a probe says so, and for good once a pipelined dial gets no answer, each
  // request waits for the reply before it.
  mutable std::atomic<bool> socks_pipelining{false};
  // The Egress's dial timings, shared by its revisions (null: not measured).
  std::shared_ptr<DialTimings> timings;

  const std::string& egress_id() const { return revision->egress_id; }
  uint64_t revision_number() const { return revision->revision; }
};
using DialTargetPtr = std::shared_ptr<const DialTarget>;

// invalid_argument for a spec without socks5, a bad address or a bad ca_cert.
Result<DialTargetPtr> make_dial_target(EgressRevisionPtr rev, std::shared_ptr<DialTimings> timings = nullptr);

}  // namespace kib::relay
