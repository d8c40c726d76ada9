#pragma once
// The boundary between the control path (API ▶ store) and what enforces state
// (netns rules, data-plane loops). The services call it only after the store has
// committed; data flows one way, from the store to the runtime.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/common/latency_histogram.h"
#include "agent/common/result.h"
#include "agent/relay/moved_relay.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib {

namespace ctrl = ::kibotos::ctrl::v1;

// One immutable, published revision of an Egress, password included. Shared by every
// connection that dials through it.
struct EgressRevision {
  std::string egress_id;
  uint64_t revision = 0;
  ctrl::EgressSpec spec;
};
using EgressRevisionPtr = std::shared_ptr<const EgressRevision>;

struct RuntimeCounts {
  uint64_t active_connections = 0;
  uint64_t draining_connections = 0;
  uint64_t inherited_connections = 0;  // taken over from the previous agent process
  uint64_t access_log_lines = 0;       // written to the access log (log.access)
  uint64_t access_log_dropped = 0;     // ... dropped: over the rate, the writer behind, a failed write
};

// A relayed connection handed from one agent process to the next (take-over).
struct MovedConnection {
  std::string workspace_id;
  relay::MovedRelay relay;
};
using MovedSink = std::function<void(MovedConnection)>;

// Counters of one Egress as one Workspace uses it, since this process attached it.
struct EgressMetrics {
  std::string egress_id;
  uint64_t active_connections = 0;
  uint64_t draining_connections = 0;
  uint64_t dial_failures = 0;  // guest connections whose dial failed, refusals included
  uint64_t dial_refusals = 0;  // ... because every endpoint address was special-purpose
  uint64_t opened = 0;
  std::vector<std::pair<std::string, uint64_t>> closed;          // by reason, every reason
  std::vector<std::pair<std::string, uint64_t>> dial_failed_by;  // by cause, every cause
  uint64_t bytes_from_guest = 0;
  uint64_t bytes_to_guest = 0;
};

// One Egress's dial stage latencies (every Workspace, every revision), while it exists.
struct EgressTimingMetrics {
  std::string egress_id;
  // (stage, tls) -> histogram; stage: resolve, connect, tls_handshake, socks5, dial,
  // first_byte; tls: "full" / "resumed" for tls_handshake, "" otherwise.
  struct Stage {
    std::string stage;
    std::string tls;
    LatencyHistogram::Snapshot histogram;
  };
  std::vector<Stage> stages;
  bool probed = false;  // its server was asked at least once (health known)
  bool up = false;      // ... and the newest probe found it healthy
  uint64_t probe_failures = 0;
};

// A Workspace's guest DNS, when its policy has resolvers.
struct DnsMetrics {
  uint64_t queries = 0;                                    // accepted from the guest
  uint64_t answers = 0;                                    // resolvers' answers delivered to it
  uint64_t timeouts = 0;                                   // attempts that timed out (each may fail over)
  uint64_t failovers = 0;                                  // queries moved to the next resolver
  std::vector<std::pair<std::string, uint64_t>> failures;  // by reason, as in status
  uint64_t in_flight = 0;
  uint64_t query_bytes = 0;
  uint64_t answer_bytes = 0;
};

struct WorkspaceMetrics {
  std::string workspace_id;
  uint64_t refused_over_limit = 0;  // guest connections reset at a connection cap
  uint64_t refused_uncovered = 0;   // ... that no route of the policy covers (a rule race)
  std::vector<EgressMetrics> egresses;
  std::optional<DnsMetrics> dns;
};

// One page of the live connections view (ListConnections).
struct ConnectionPage {
  std::vector<ctrl::Connection> connections;  // in ID order; open_time not set
  bool more = false;                          // connections with greater IDs exist
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // A new revision of an Egress (created or updated). Connections through older
  // revisions drain for drain_seconds (0 = close when the new revision takes over).
  virtual void egress_published(EgressRevisionPtr rev, uint32_t drain_seconds) = 0;
  // The Egress is gone: connections still draining through it close at once.
  virtual void egress_deleted(const std::string& egress_id) = 0;
  // A Workspace's policy (new or changed). Installs or replaces what the agent
  // enforces in the namespace. Errors are reported in workspace_status as well.
  virtual Status workspace_applied(const std::string& workspace_id, const std::string& netns,
                                   const ctrl::NetworkPolicy& policy, uint32_t drain_seconds) = 0;
  // At a start, before workspace_applied is called for each stored Workspace in
  // turn: (workspace ID, netns path, policy) of all of them, so that the runtime can
  // do the namespace work that needs no order in parallel first. Each is still
  // applied by workspace_applied; workspaces_restored() ends the start (what was
  // prepared and not claimed is let go).
  struct Restoring {
    std::string workspace_id;
    std::string netns;
    ctrl::NetworkPolicy policy;
  };
  virtual void workspaces_restoring(const std::vector<Restoring>& /*all*/) {}
  virtual void workspaces_restored() {}
  // Removes everything installed for the Workspace and closes its connections.
  virtual void workspace_deleted(const std::string& workspace_id) = 0;
  // Removes what the agent may have left in a deleted Workspace's namespace (a crash
  // before its removal, a failed attach or removal), if the path still names the
  // namespace with that identity (st_dev, st_ino). ok when nothing is left: removed
  // now, or the path names another namespace or none.
  virtual Status leftovers_removed(const std::string& /*netns*/, uint64_t /*dev*/, uint64_t /*ino*/) { return {}; }
  // Attached Workspaces whose netns path no longer names the namespace they were
  // attached in (the namespace was deleted, and maybe another one mounted there).
  virtual std::vector<std::string> workspaces_moved() const { return {}; }
  // Lets go of a Workspace's namespace and closes its connections, leaving its rules
  // there (they keep dropping covered traffic: fail closed); the next
  // workspace_applied attaches it afresh by path.
  virtual void workspace_released(const std::string& /*workspace_id*/) {}
  // Puts back the rules of attached Workspaces that were removed or changed behind
  // the agent's back (each is logged; status shows why while putting them back fails).
  virtual void workspaces_repaired() {}
  // Whether the namespace with this identity (st_dev, st_ino) may be attached at
  // all: failed_precondition for the agent's own (its rules would catch the host's
  // traffic, e.g. a /proc/PID/ns/net path whose PID came to name a host process).
  virtual Status workspace_attachable(uint64_t /*dev*/, uint64_t /*ino*/) const { return {}; }
  virtual ctrl::NetworkPolicyStatus workspace_status(const std::string& workspace_id) const = 0;
  virtual RuntimeCounts counts() const = 0;
  // Take-over (daemon/handover.h): the next agent accepts this host's guests now.
  // Closes every Workspace's listeners, TCP and DNS; the connections stay until they
  // end. Nothing else is called after it.
  virtual void stop_accepting() {}
  // Take-over: every Workspace's transparent TCP listening socket (borrowed), for the
  // next agent to accept on the same sockets (netns/inherited_listeners.h).
  virtual std::vector<int> listening_sockets() const { return {}; }
  // Take-over, after stop_accepting: hands every established plain relay to `sink`
  // (called on the data-plane threads, possibly after this returned) and returns
  // once all were handed on or `timeout` passed. The rest (TLS, dials) stay here.
  virtual void move_connections(const MovedSink& /*sink*/, std::chrono::milliseconds /*timeout*/) {}
  // The new agent's side: relays on a connection the previous agent moved out (reset
  // when its Workspace or Egress is unknown here).
  virtual void adopt_connection(MovedConnection /*moved*/) {}
  // Every attached Workspace's counters (the metrics endpoint); none without a data plane.
  virtual std::vector<WorkspaceMetrics> metrics() const { return {}; }
  // Every published Egress's dial latencies (the metrics endpoint).
  virtual std::vector<EgressTimingMetrics> egress_timings() const { return {}; }
  // Up to `limit` live connections with IDs above `after_id` (of one Workspace, or
  // of every one when workspace_id is empty); none without a data plane.
  virtual Result<ConnectionPage> connections(const std::string& /*workspace_id*/, uint64_t /*after_id*/,
                                             size_t /*limit*/) const {
    return ConnectionPage{};
  }
};

}  // namespace kib
