#pragma once
// WorkspaceService: the store side of the RPCs of API.md. The Workspace is committed
// first, then handed to the runtime; when the runtime cannot enforce it, the
// Workspace stays stored, the failure shows in network_policy_status.error, and
// retry_failed_applies hands it over again (a namespace that appears after the agent
// started, as after a host reboot, gets its rules without an operator's call). A
// deleted Workspace's rules that could not be removed are retried the same way.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/api/connect/method_registry.h"
#include "agent/api/services/service_env.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::api {

class WorkspaceService {
 public:
  explicit WorkspaceService(ServiceEnv& env) : env_(env) {}

  Result<ctrl::CreateWorkspaceResponse> create(const ctrl::CreateWorkspaceRequest& req);
  Result<ctrl::GetWorkspaceResponse> get(const ctrl::GetWorkspaceRequest& req);
  Result<ctrl::ListWorkspacesResponse> list(const ctrl::ListWorkspacesRequest& req);
  Result<ctrl::UpdateNetworkPolicyResponse> update_policy(const ctrl::UpdateNetworkPolicyRequest& req);
  Result<ctrl::DeleteWorkspaceResponse> remove(const ctrl::DeleteWorkspaceRequest& req);
  Result<ctrl::UpdateWorkspaceLabelsResponse> update_labels(const ctrl::UpdateWorkspaceLabelsRequest& req);
  Result<ctrl::UpdateWorkspaceAnnotationsResponse> update_annotations(
      const ctrl::UpdateWorkspaceAnnotationsRequest& req);
  Result<ctrl::ListConnectionsResponse> list_connections(const ctrl::ListConnectionsRequest& req);

  // Hands every stored Workspace to the runtime (at start, after the Egresses).
  Status publish_all();
  // Hands the Workspaces the runtime last failed to enforce to it again, as stored
  // now, with the drain_seconds of the failed apply.
  void retry_failed_applies();
  // Attaches again, by path, the Workspaces whose path names another namespace than
  // the one they hold (a guest's namespace deleted and created again at the same
  // path while the agent runs: without this, the new one would have no rules).
  void reattach_moved();
  void register_methods(MethodRegistry& registry);

 private:
  // True when the runtime enforces it.
  bool apply_to_runtime(const ctrl::Workspace& w, uint32_t drain_seconds);
  // After Workspaces were attached again by path (at start, on a retry): stores the
  // identity of the namespace each path names now where it changed, so that
  // CreateWorkspace's "already attached" check knows the namespaces held today.
  void refresh_netns_keys(const std::vector<ctrl::Workspace>& attached);
  // Asks the runtime to remove what a deleted Workspace left in its namespace, then
  // forgets the note; a failure keeps it (in detach_errors_ too, for the retries).
  void finish_detach(const store::PendingDetach& p);
  // At start and on retries: every note a crash or a failed removal left.
  Status finish_pending_detaches();
  // network_policy_status as the runtime reports it, with the last apply error when
  // the runtime's own report has none.
  ctrl::NetworkPolicyStatus status_of(const std::string& workspace_id) const;
  ctrl::Workspace with_status(ctrl::Workspace w) const;
  // A write's response with its Workspace's live status (not stored: the runtime's).
  template <typename Resp>
  Result<Resp> with_status(Result<Resp> r) const {
    if (r.ok()) *r->mutable_workspace() = with_status(r->workspace());
    return r;
  }

  struct ApplyError {
    std::string message;
    uint32_t drain_seconds = 0;
  };
  ServiceEnv& env_;
  mutable std::mutex errors_mu_;
  std::map<std::string, ApplyError> apply_errors_;
  std::map<std::string, std::string> detach_errors_;  // deleted Workspace -> why its rules remain
};

}  // namespace kib::api
