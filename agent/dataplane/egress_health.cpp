#include "agent/dataplane/egress_health.h"

#include <spdlog/spdlog.h>

namespace kib::dataplane {

std::string EgressHealth::record(const relay::ProbeResult& r, bool tls) {
  std::string state = "healthy";
  if (!r.request_answered) {
    if (!r.connected)
      state = "unreachable";
    else if (tls && !r.tls_verified)
      state = "tls_failed";
    else
      state = "socks_failed";
  }
  std::lock_guard lk(mu_);
  std::string before = std::move(v_.state);
  v_.state = state;
  const auto now = std::chrono::system_clock::now();
  if (r.request_answered) {
    v_.last_success = now;
  } else {
    v_.last_failure = now;
    v_.last_failure_reason = r.failure;
    ++v_.probe_failures;
  }
  return before;
}

EgressHealthProber::EgressHealthProber(relay::ProbeOptions options, std::chrono::milliseconds interval, InUse in_use)
    : options_(std::move(options)),
      interval_(interval),
      in_use_(std::move(in_use)),
      thread_([this](std::stop_token stop) { run(stop); }) {}

EgressHealthProber::~EgressHealthProber() {
  thread_.request_stop();
  cv_.notify_all();
}

void EgressHealthProber::run(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    const auto round = std::chrono::steady_clock::now();
    for (auto& [target, health] : in_use_()) {
      if (stop.stop_requested()) return;
      // Not pipelined: the exchange every dial of a server that waits makes.
      auto r = relay::probe_socks5_server(*target, options_, /*pipelined=*/false, stop);
      if (!r.ok()) return;  // stopped
      const bool tls = target->tls != nullptr;
      const std::string before = health->record(*r, tls);
      const EgressHealth::View now = health->view();
      if (now.state == before) continue;
      if (now.state == "healthy")
        spdlog::info("egress {}: healthy (its server answered a SOCKS5 exchange{})", target->egress_id(),
                     tls ? " after a verified TLS handshake" : "");
      else
        spdlog::warn("egress {}: {}: {}", target->egress_id(), now.state, now.last_failure_reason);
    }
    std::unique_lock lk(mu_);
    cv_.wait_until(lk, stop, round + interval_, [] { return false; });
  }
}

}  // namespace kib::dataplane
