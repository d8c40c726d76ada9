#pragma once
// kib::Runtime backed by the io_uring data plane: one Worker (thread + ring) per
// core, Egress revisions published to every worker, Workspaces attached through a
// WorkspaceAttacher (netns/), each one's listeners on dataplane.workspace_loops of
// the workers (the least loaded); the Workspaces' DNS goes to the DNS service.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/config/config.h"
#include "agent/dataplane/egress_health.h"
#include "agent/dataplane/pipelining_prober.h"
#include "agent/dataplane/worker.h"
#include "agent/dataplane/workspace_attacher.h"
#include "agent/dns/dns_service.h"
#include "agent/runtime/runtime.h"

namespace kib::dataplane {

class DataplaneRuntime final : public Runtime, private WorkerHost {
 public:
  // Probes io_uring, raises RLIMIT_NOFILE, starts the workers. The attacher must
  // outlive the runtime.
  static Result<std::unique_ptr<DataplaneRuntime>> create(const Config& config, WorkspaceAttacher& attacher);
  ~DataplaneRuntime() override;

  void egress_published(EgressRevisionPtr rev, uint32_t drain_seconds) override;
  void egress_deleted(const std::string& egress_id) override;
  void workspaces_restoring(const std::vector<Restoring>& all) override;
  void workspaces_restored() override;
  Status workspace_applied(const std::string& workspace_id, const std::string& netns, const ctrl::NetworkPolicy& policy,
                           uint32_t drain_seconds) override;
  void workspace_deleted(const std::string& workspace_id) override;
  std::vector<std::string> workspaces_moved() const override;
  void workspace_released(const std::string& workspace_id) override;
  void workspaces_repaired() override;
  Status workspace_attachable(uint64_t dev, uint64_t ino) const override { return attacher_.attachable(dev, ino); }
  Status leftovers_removed(const std::string& netns, uint64_t dev, uint64_t ino) override;
  ctrl::NetworkPolicyStatus workspace_status(const std::string& workspace_id) const override;
  RuntimeCounts counts() const override;
  void stop_accepting() override;
  void move_connections(const MovedSink& sink, std::chrono::milliseconds timeout) override;
  std::vector<int> listening_sockets() const override;
  void adopt_connection(MovedConnection moved) override;
  std::vector<WorkspaceMetrics> metrics() const override;
  std::vector<EgressTimingMetrics> egress_timings() const override;
  Result<ConnectionPage> connections(const std::string& workspace_id, uint64_t after_id, size_t limit) const override;

  unsigned loops() const { return static_cast<unsigned>(workers_.size()); }

 private:
  DataplaneRuntime(const Config& config, WorkspaceAttacher& attacher, policy::EndpointAddressPolicy addr);
  ctrl::NetworkPolicyStatus tcp_status(const std::string& workspace_id) const;
  // Drops an attached Workspace: its rules removed (detach) or left (release), then
  // its listeners and connections closed in the loops and DNS.
  void forget_workspace(const std::string& workspace_id, bool remove_rules);
  void ack_egress(unsigned worker, const std::string& egress_id, uint64_t revision) override;
  void ack_policy(unsigned worker, const std::string& workspace_id, uint64_t revision) override;

  struct WorkspaceEntry {
    ctrl::NetworkPolicy policy;
    std::shared_ptr<WorkspaceStats> stats;
    std::vector<uint64_t> acked;  // policy revision per worker
    std::string error;
    std::string repair_error;     // the rules were removed and putting them back failed
    std::vector<unsigned> loops;  // the workers that accept its connections
    // Its transparent TCP listeners (the workers hold them too), for a take-over.
    std::vector<std::shared_ptr<UniqueFd>> tcp_listeners;
  };
  // A fresh Workspace's accepting loops (workspace_loops_ of them, the least loaded),
  // counted in loop_workspaces_; unplace_workspace gives them back. Under mu_.
  std::vector<unsigned> place_workspace();
  void unplace_workspace(const std::vector<unsigned>& loops);

  WorkspaceAttacher& attacher_;
  policy::EndpointAddressPolicy address_policy_;
  std::atomic<int64_t> total_connections_{0};
  std::atomic<uint64_t> inherited_connections_{0};
  std::atomic<uint64_t> next_connection_id_;  // starts at the wall clock in µs (see create)
  std::atomic<unsigned> next_adopting_{0};
  std::unique_ptr<AccessLog> access_log_;  // before workers_: they write to it until they stop
  std::atomic<bool> restoring_{false};     // between workspaces_restoring and workspaces_restored  // spreads adopted
                                           // connections over a Workspace's loops
  WorkerOptions worker_opts_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // The guests' DNS (its own loop thread), told everything the workers are.
  std::unique_ptr<dns::DnsService> dns_;
  std::unique_ptr<PipeliningProber> prober_;  // asks each revision's SOCKS5 server
  // The Egresses in use, with their health; called by health_prober_'s thread.
  std::vector<std::pair<relay::DialTargetPtr, std::shared_ptr<EgressHealth>>> egresses_in_use() const;

  mutable std::mutex mu_;  // guards the maps below; never held while calling a worker
  std::map<std::string, std::vector<uint64_t>> egress_acks_;  // egress -> revision per worker
  // Dial latencies per published Egress, shared by its revisions' DialTargets.
  std::map<std::string, std::shared_ptr<relay::DialTimings>> timings_;
  std::map<std::string, relay::DialTargetPtr> targets_;  // the newest revision of each
  std::map<std::string, std::shared_ptr<EgressHealth>> health_;
  // Its thread calls egresses_in_use(): the destructor ends it first.
  std::unique_ptr<EgressHealthProber> health_prober_;
  std::map<std::string, WorkspaceEntry> workspaces_;
  unsigned workspace_loops_ = 1;         // config dataplane.workspace_loops, at most the loops
  std::vector<size_t> loop_workspaces_;  // Workspaces each loop accepts for
};

}  // namespace kib::dataplane
