#pragma once
// One data-plane thread: its own io_uring loop, its share of every Workspace's
// listeners, the newest DialTarget of every Egress, and the connections it accepted.
// Other threads talk to it only through the thread-safe methods below (posted).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/common/unique_fd.h"
#include "agent/dataplane/access_log.h"
#include "agent/dataplane/dataplane_stats.h"
#include "agent/dataplane/loop_resolver.h"
#include "agent/policy/route_matcher.h"
#include "agent/policy/special_purpose.h"
#include "agent/relay/relay_connection.h"
#include "kibotos/ctrl/v1/workspace.pb.h"
#include "uring/loop.h"

namespace kib::dataplane {

// A Workspace's policy as the loops use it; immutable once published.
struct WorkspacePlan {
  std::string id;
  uint64_t policy_revision = 0;
  policy::RouteMatcher routes;
  std::shared_ptr<WorkspaceStats> stats;
};
using WorkspacePlanPtr = std::shared_ptr<const WorkspacePlan>;

// The runtime, as seen by its workers. Thread-safe.
class WorkerHost {
 public:
  virtual void ack_egress(unsigned worker, const std::string& egress_id, uint64_t revision) = 0;
  virtual void ack_policy(unsigned worker, const std::string& workspace_id, uint64_t revision) = 0;

 protected:
  ~WorkerHost() = default;
};

struct WorkerOptions {
  uring::LoopOptions loop;
  relay::RelayTimeouts timeouts;
  uint32_t max_connections = 100000;
  uint32_t max_connections_per_workspace = 20000;
  std::atomic<int64_t>* total_connections = nullptr;       // shared by all workers
  std::atomic<uint64_t>* inherited_connections = nullptr;  // adopted from a previous agent
  const policy::EndpointAddressPolicy* address_policy = nullptr;
  policy::ResolverOptions resolver;
  size_t max_pending_lookups = 4096;  // per loop
  AccessLog* access_log = nullptr;    // null: off
  // Names the connections (ListConnections), shared by all workers: each takes the
  // next, so a later connection has a greater ID.
  std::atomic<uint64_t>* next_connection_id = nullptr;
};

class Worker final : private relay::ConnectionObserver {
 public:
  Worker(unsigned index, WorkerHost& host, const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Status start();
  // Closes every connection and listener, then joins the thread.
  void stop();

  // Thread-safe; run on the loop.
  void publish_egress(relay::DialTargetPtr target, uint32_t drain_seconds);
  void delete_egress(const std::string& egress_id);
  void apply_workspace(WorkspacePlanPtr plan, std::shared_ptr<UniqueFd> v4, std::shared_ptr<UniqueFd> v6,
                       uint32_t drain_seconds);
  void remove_workspace(const std::string& workspace_id);
  // Closes every Workspace's listeners; connections stay.
  void stop_accepting();
  // Take-over: moves out every established plain relay (RelayConnection::move_out),
  // handing each to `sink` on this worker's thread, then calls `done` there. A
  // connection that could not move was reset and is not handed on.
  using MovedSink = std::function<void(const std::string& workspace_id, relay::MovedRelay)>;
  void move_connections(MovedSink sink, std::function<void()> done);
  // Relays on a connection another agent moved out. Reset when this worker does not
  // know its Workspace or Egress.
  void adopt(std::string workspace_id, std::shared_ptr<relay::MovedRelay> moved);
  // The live connections view: up to `limit` of this loop's connections with IDs
  // above `after_id`, the smallest, in ID order (of one Workspace, or of every one
  // when workspace_id is empty), given to `done` on the loop's thread. Walks only
  // the connections it skips and the ones it returns (each list is in ID order).
  using ConnectionsFn = std::function<void(std::vector<::kibotos::ctrl::v1::Connection>)>;
  void list_connections(std::string workspace_id, uint64_t after_id, size_t limit, ConnectionsFn done);

  // Loop-thread internals (used by Listener).
  struct LoopWorkspace;
  void on_accept(LoopWorkspace& ws, UniqueFd fd);
  void maybe_free(LoopWorkspace* ws);

 private:
  void thread_main();
  void resolve(relay::RelayConnection& c, const std::string& host) override;
  const policy::EndpointAddressPolicy& address_policy() override { return *opts_.address_policy; }
  void on_established(relay::RelayConnection& c) override;
  void on_dial_failed(relay::RelayConnection& c, relay::DialCause cause, const std::string& reason) override;
  void on_out_of_resources(int err) override;
  void on_closed(relay::RelayConnection& c) override;
  void on_released(relay::RelayConnection& c) override;
  void on_moved(relay::RelayConnection& c, relay::MovedRelay moved) override;
  void adopt_on_loop(const std::string& workspace_id, relay::MovedRelay moved);
  void on_moved_count_down();
  // A relayed connection of ws, counted (active, or draining) and on its list.
  relay::RelayConnection* add_connection(LoopWorkspace& ws, UniqueFd guest, const relay::DialTargetPtr& target,
                                         bool draining);
  void drain(relay::RelayConnection& c, uint32_t drain_seconds);
  EgressStats& stats_for(LoopWorkspace& ws, const std::string& egress_id);
  // Counts (and logs, within the budget) a failure of ws's connections through the
  // Egress; budget: a dial cause's, or kDialCauseCount for a reset after the dial.
  void record_failure(LoopWorkspace& ws, const std::string& egress_id, EgressStats& es, size_t budget,
                      const std::string& what);
  void retire(std::unique_ptr<LoopWorkspace> ws);
  void log_access(const LoopWorkspace& ws, const relay::RelayConnection& c);
  // The access log line of a guest connection routed to an Egress not published here.
  void log_unpublished(const LoopWorkspace& ws, const std::string& egress_id, int guest_fd,
                       const relay::SocketAddress& dst, std::string_view error);
  ::kibotos::ctrl::v1::Connection describe(const LoopWorkspace& ws, const relay::RelayConnection& c) const;

  const unsigned index_;
  WorkerHost& host_;
  WorkerOptions opts_;
  std::thread thread_;
  std::unique_ptr<uring::Loop> loop_;
  std::unique_ptr<LoopResolver> resolver_;
  std::shared_ptr<const size_t> resolver_polls_;
  // Loop-thread state.
  std::unordered_map<std::string, relay::DialTargetPtr> egresses_;
  std::unordered_map<std::string, std::unique_ptr<LoopWorkspace>> workspaces_;
  std::vector<std::unique_ptr<LoopWorkspace>> retired_;
  MovedSink move_sink_;
  std::function<void()> move_done_;
  size_t moving_ = 0;
  // The dial failure on_dial_failed just reported: its connection's close follows at
  // once (on_closed), which the access log line tells it with.
  const relay::RelayConnection* failed_dial_ = nullptr;
  relay::DialCause failed_cause_ = relay::DialCause::local;
  std::string failed_reason_;
};

}  // namespace kib::dataplane
