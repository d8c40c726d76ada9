#pragma once
// The control plane: the store plus the EgressService, WorkspaceService and
// AgentService handlers. The daemon opens it once and registers its methods with the
// Connect server.
#include <memory>

#include "agent/api/connect/method_registry.h"
#include "agent/common/result.h"
#include "agent/config/config.h"
#include "agent/runtime/runtime.h"

namespace kib::api {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // Opens (creating or migrating) the store under config.state_dir; fails with a
  // clear message if another agent holds the state dir. runtime must outlive it.
  static Result<std::unique_ptr<ControlPlane>> open(const Config& config, Runtime& runtime);
  // Registers every RPC of the three services.
  virtual void register_methods(MethodRegistry& registry) = 0;
  // Publishes every stored Egress and Workspace to the runtime (at start, after
  // open): the agent re-attaches what it had before a restart.
  virtual void publish_all() = 0;
  // GET /metrics: the agent's counts and the data plane's counters, Prometheus text.
  virtual Result<std::string> metrics_text() = 0;
};

}  // namespace kib::api
