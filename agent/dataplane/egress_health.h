#pragma once
// Egress health: while Workspaces use an Egress, a thread of its own asks its server,
// once per dataplane.egress_probe_interval and one Egress at a time, for a whole
// SOCKS5 exchange (TLS first when the Egress has it: socks5_pipelining_probe.h's
// probe_socks5_server), so that an operator sees a dead Egress before the guests do.
// An Egress no Workspace uses is not asked.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/relay/dial_target.h"
#include "agent/relay/socks5_pipelining_probe.h"

namespace kib::dataplane {

// One Egress's health, written by the prober, read by status and metrics.
class EgressHealth {
 public:
  struct View {
    // "unknown" (not probed yet), "healthy" (a whole SOCKS5 exchange answered, after
    // a verified TLS handshake when the Egress has TLS), "unreachable" (its name did
    // not resolve, every address was refused, or no TCP connection), "tls_failed"
    // (handshake or verification), "socks_failed" (no SOCKS5 answer to the greeting,
    // credentials or request).
    std::string state = "unknown";
    std::chrono::system_clock::time_point last_success{};  // epoch: never
    std::chrono::system_clock::time_point last_failure{};
    std::string last_failure_reason;
    uint64_t probe_failures = 0;
  };
  View view() const {
    std::lock_guard lk(mu_);
    return v_;
  }
  // Records one probe; returns the state before it.
  std::string record(const relay::ProbeResult& r, bool tls);

 private:
  mutable std::mutex mu_;
  View v_;
};

class EgressHealthProber {
 public:
  // The Egresses in use now (their newest revision) and where to record each.
  using InUse = std::function<std::vector<std::pair<relay::DialTargetPtr, std::shared_ptr<EgressHealth>>>()>;
  EgressHealthProber(relay::ProbeOptions options, std::chrono::milliseconds interval, InUse in_use);
  ~EgressHealthProber();  // a probe under way ends within ~100 ms

 private:
  void run(const std::stop_token& stop);

  const relay::ProbeOptions options_;
  const std::chrono::milliseconds interval_;
  const InUse in_use_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: it starts once the members above exist
};

}  // namespace kib::dataplane
