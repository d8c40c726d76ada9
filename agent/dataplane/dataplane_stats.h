#pragma once
// Counters shared between the loops (writers) and the control API (reader): atomics
// and short locks only, so status answers even while the loops are saturated.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kib::dataplane {

struct EgressStats {
  std::atomic<int64_t> active{0};
  std::atomic<int64_t> draining{0};
  std::atomic<uint64_t> dial_failures{0};
  std::atomic<uint64_t> dial_refusals{0};  // failures because every address was refused
  mutable std::mutex mu;
  std::string last_error;

  void set_error(const std::string& e) {
    std::lock_guard lk(mu);
    last_error = e;
  }
  std::string error() const {
    std::lock_guard lk(mu);
    return last_error;
  }
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
