#pragma once
// Counters shared between the loops (writers) and the control API (reader): atomics
// and short locks only, so status answers even while the loops are saturated.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent/relay/egress_dial.h"
#include "agent/relay/relay_accounting.h"

namespace kib::dataplane {

// One log line per interval at most, and how many were held back meanwhile
// (lock-free: the loops call it on every failure).
class LogBudget {
 public:
  static constexpr int64_t kIntervalNs = 10'000'000'000;
  // Whether to log now; *held_back: lines not logged since the last one.
  bool admit(int64_t now_ns, uint64_t* held_back) {
    int64_t next = next_ns_.load(std::memory_order_relaxed);
    if (now_ns < next || !next_ns_.compare_exchange_strong(next, now_ns + kIntervalNs)) {
      held_back_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    *held_back = held_back_.exchange(0, std::memory_order_relaxed);
    return true;
  }

 private:
  std::atomic<int64_t> next_ns_{0};
  std::atomic<uint64_t> held_back_{0};
};

// One Workspace's connections through one Egress: the loops count, the control API
// reads. Counts start when this process attached the Workspace.
struct EgressStats {
  std::atomic<int64_t> active{0};
  std::atomic<int64_t> draining{0};
  std::atomic<uint64_t> opened{0};  // dials started, and connections inherited from the previous process
  std::array<std::atomic<uint64_t>, relay::kCloseReasonCount> closed{};
  std::atomic<uint64_t> dial_failures{0};
  std::atomic<uint64_t> dial_refusals{0};  // failures because every address was refused
  std::array<std::atomic<uint64_t>, relay::kDialCauseCount> dial_failed_by{};
  relay::TrafficCounters traffic;
  // Log lines of failures, per dial cause and one for resets after the dial.
  std::array<LogBudget, relay::kDialCauseCount + 1> log_budget;

  // The newest failure (a dial, or the Egress resetting an established connection),
  // shown until a dial through the Egress succeeds again.
  struct Failure {
    std::string message;  // empty: none since the last success
    std::chrono::system_clock::time_point at;
    uint64_t consecutive = 0;  // failures since the last success
  };
  void record_failure(std::string message) {
    std::lock_guard lk(mu);
    failure.message = std::move(message);
    failure.at = std::chrono::system_clock::now();
    ++failure.consecutive;
    failing.store(true, std::memory_order_relaxed);
  }
  // Called on every established connection: a relaxed load unless a failure is shown.
  void record_success() {
    if (!failing.load(std::memory_order_relaxed)) return;
    std::lock_guard lk(mu);
    failure = {};
    failing.store(false, std::memory_order_relaxed);
  }
  Failure last_failure() const {
    std::lock_guard lk(mu);
    return failure;
  }

 private:
  mutable std::mutex mu;
  Failure failure;
  std::atomic<bool> failing{false};
};

// One Workspace's counters, kept per Egress it has routed through.
class WorkspaceStats {
 public:
  std::shared_ptr<EgressStats> egress(const std::string& id) {
    std::lock_guard lk(mu_);
    auto& p = by_egress_[id];
    if (!p) p = std::make_shared<EgressStats>();
    return p;
  }
  std::shared_ptr<EgressStats> find(const std::string& id) const {
    std::lock_guard lk(mu_);
    auto it = by_egress_.find(id);
    return it == by_egress_.end() ? nullptr : it->second;
  }
  // fn(egress_id, stats) for every Egress this Workspace has routed through, also
  // those its policy no longer names (their connections may still drain).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    std::lock_guard lk(mu_);
    for (const auto& [id, st] : by_egress_) fn(id, *st);
  }
  std::atomic<int64_t> connections{0};  // this workspace's, for its cap
  std::atomic<uint64_t> refused_over_limit{0};
  std::atomic<uint64_t> refused_uncovered{0};

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<EgressStats>> by_egress_;
};

}  // namespace kib::dataplane
