#include "agent/api/services/workspace_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "agent/api/conventions/page_token.h"
#include "agent/api/conventions/proto_bytes.h"
#include "agent/api/conventions/quoted.h"
#include "agent/api/services/list_page.h"
#include "agent/api/services/metadata_update.h"
#include "agent/api/services/netns_identity.h"
#include "agent/api/services/stored_resources.h"
#include "agent/api/services/workspace_policy.h"

namespace kib::api {
namespace {

constexpr const char* kService = "kibotos.ctrl.v1.WorkspaceService/";

using Workspace = ctrl::Workspace;

// The Workspace as stored now, in its own read; none when deleted.
Result<std::optional<ctrl::Workspace>> load_stored(store::Store& store, const std::string& id) {
  std::optional<Result<std::optional<ctrl::Workspace>>> out;
  KIB_TRY(store.read([&](store::Transaction& txn) -> Status {
    out = load_workspace(txn, id);
    return {};
  }));
  return std::move(*out);
}

// The policy as the server keeps it: "network_policy.revision is ignored" in writes.
ctrl::NetworkPolicy content_of(ctrl::NetworkPolicy p) {
  p.set_revision(0);
  return p;
}

}  // namespace

ctrl::NetworkPolicyStatus WorkspaceService::status_of(const std::string& id) const {
  ctrl::NetworkPolicyStatus s = env_.runtime.workspace_status(id);
  // Why the last apply failed says more than the runtime's "not attached".
  std::lock_guard<std::mutex> g(errors_mu_);
  auto it = apply_errors_.find(id);
  if (it != apply_errors_.end()) s.set_error(it->second.message);
  return s;
}

ctrl::Workspace WorkspaceService::with_status(ctrl::Workspace w) const {
  *w.mutable_network_policy_status() = status_of(w.workspace_id());
  return w;
}

void WorkspaceService::reattach_moved() {
  for (const auto& id : env_.runtime.workspaces_moved()) {
    env_.commands.in_store_order([&] {
      auto w = load_stored(env_.store, id);
      // Deleted meanwhile, or the path names nothing yet: status says the namespace
      // is gone, and its rules stay where they were.
      if (!w.ok() || !*w || !network_namespace_identity((*w)->netns()).ok()) return;
      auto& ws = **w;
      spdlog::warn("workspace {}: {} names another network namespace now; attaching that one", id, ws.netns());
      env_.runtime.workspace_released(id);
      if (apply_to_runtime(ws, 0)) refresh_netns_keys({ws});
    });
  }
}

bool WorkspaceService::apply_to_runtime(const ctrl::Workspace& w, uint32_t drain_seconds) {
  Status s = env_.runtime.workspace_applied(w.workspace_id(), w.netns(), w.network_policy(), drain_seconds);
  std::lock_guard<std::mutex> g(errors_mu_);
  auto it = apply_errors_.find(w.workspace_id());
  if (s.ok()) {
    if (it != apply_errors_.end()) spdlog::info("workspace {}: enforced again", w.workspace_id());
    apply_errors_.erase(w.workspace_id());
  } else {
    // Logged when it changes, not on every retry.
    if (it == apply_errors_.end() || it->second.message != s.error().message)
      spdlog::warn("workspace {}: {} (retrying)", w.workspace_id(), s.error().message);
    apply_errors_[w.workspace_id()] = ApplyError{s.error().message, drain_seconds};
  }
  return s.ok();
}

void WorkspaceService::refresh_netns_keys(const std::vector<ctrl::Workspace>& attached) {
  std::vector<std::pair<std::string, store::NetnsKey>> now;
  for (const auto& w : attached) {
    auto k = network_namespace_identity(w.netns());
    if (k.ok()) now.emplace_back(w.workspace_id(), *k);
  }
  if (now.empty()) return;
  Status st = env_.store.write([&](store::Transaction& txn) -> Status {
    for (const auto& [id, key] : now) {
      KIB_TRY_ASSIGN(auto stored, txn.netns_key(id));
      if (stored == key) continue;
      KIB_TRY(txn.set_netns_key(id, key));
      spdlog::info("workspace {}: its path names another network namespace than the one stored; recorded", id);
    }
    return {};
  });
  // Not fatal: the runtime refuses a second Workspace in a namespace it holds anyway.
  if (!st.ok()) spdlog::warn("recording the namespaces of re-attached Workspaces: {}", st.error().message);
}

void WorkspaceService::retry_failed_applies() {
  std::map<std::string, ApplyError> failed;
  bool detaches = false;
  {
    std::lock_guard<std::mutex> g(errors_mu_);
    failed = apply_errors_;
    detaches = !detach_errors_.empty();
  }
  // A delete whose rule removal failed: its note is finished like at a start.
  if (detaches)
    env_.commands.in_store_order([&] {
      if (Status st = finish_pending_detaches(); !st.ok())
        spdlog::warn("removing the rules of deleted Workspaces: {}", st.error().message);
    });
  for (const auto& [id, err] : failed) {
    // In store order: a write of this Workspace meanwhile is either already applied
    // (and this one re-applies what it stored) or waits for this one. (Bindings are
    // captured by name: clang before 16 cannot capture structured bindings.)
    env_.commands.in_store_order([&, &id = id, &err = err] {
      auto stored = load_stored(env_.store, id);
      if (!stored.ok()) return;  // the next period tries again
      auto& w = *stored;
      if (!w) {  // deleted meanwhile
        std::lock_guard<std::mutex> g(errors_mu_);
        apply_errors_.erase(id);
        return;
      }
      {
        std::lock_guard<std::mutex> g(errors_mu_);
        if (!apply_errors_.count(id)) return;  // applied meanwhile
      }
      if (apply_to_runtime(*w, err.drain_seconds)) refresh_netns_keys({*w});
    });
  }
}

Result<ctrl::CreateWorkspaceResponse> WorkspaceService::create(const ctrl::CreateWorkspaceRequest& req) {
  using Resp = ctrl::CreateWorkspaceResponse;
  store::NetnsKey key;
  ctrl::Workspace created;
  auto precheck = [&]() -> Status {
    KIB_TRY(validate_labels(req.labels()));
    KIB_TRY(validate_annotations(req.annotations()));
    KIB_TRY(validate_policy_shape(req.network_policy()));
    KIB_TRY_ASSIGN(auto k, network_namespace_identity(req.netns()));
    key = k;
    if (Status st = env_.runtime.workspace_attachable(key.dev, key.ino); !st.ok())
      return Error{st.error().code, "netns " + quoted(req.netns()) + " " + st.error().message};
    return {};
  };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY(check_policy_refs(txn, req.network_policy()));
    KIB_TRY_ASSIGN(auto attached, txn.netns_attached(key));
    if (attached)
      return Error{Code::failed_precondition, "netns " + quoted(req.netns()) + " is already attached to a Workspace"};
    auto now = to_timestamp(env_.clock());
    ctrl::Workspace w;
    w.set_workspace_id(store::random_id("ws-"));
    w.set_netns(req.netns());
    *w.mutable_network_policy() = content_of(req.network_policy());
    w.mutable_network_policy()->set_revision(1);
    *w.mutable_created_at() = now;
    *w.mutable_updated_at() = now;
    *w.mutable_labels() = req.labels();
    *w.mutable_annotations() = req.annotations();
    w.set_labels_revision(1);
    w.set_annotations_revision(1);
    KIB_TRY(txn.insert(store::Kind::workspace, w.workspace_id(), w.SerializeAsString(), key));
    KIB_TRY(txn.set_refs(w.workspace_id(), policy_refs(w.network_policy())));
    created = w;
    Resp resp;
    *resp.mutable_workspace() = w;
    return resp;
  };
  return with_status(env_.commands.run<Resp>(kService + std::string("CreateWorkspace"), req, req.command_id(), precheck,
                                             apply, [&] { apply_to_runtime(created, 0); }));
}

Result<ctrl::GetWorkspaceResponse> WorkspaceService::get(const ctrl::GetWorkspaceRequest& req) {
  KIB_TRY(require_id<Workspace>(req.workspace_id()));
  ctrl::GetWorkspaceResponse resp;
  KIB_TRY(env_.store.read([&](store::Transaction& txn) -> Status {
    KIB_TRY_ASSIGN(auto w, must_load<Workspace>(txn, req.workspace_id()));
    *resp.mutable_workspace() = std::move(w);
    return {};
  }));
  *resp.mutable_workspace() = with_status(resp.workspace());
  return resp;
}

Result<ctrl::ListWorkspacesResponse> WorkspaceService::list(const ctrl::ListWorkspacesRequest& req) {
  ctrl::ListWorkspacesResponse resp;
  ListQuery q{store::Kind::workspace, "workspace", req.page_size(), req.page_token(), &req.label_selector()};
  auto next = list_page(env_.store, q, [&](const store::ResourceRow& row, bool append) -> Result<bool> {
    KIB_TRY_ASSIGN(auto w, decode_stored<Workspace>(row));
    if (!selector_matches(req.label_selector(), w.labels())) return false;
    if (append) *resp.add_workspaces() = std::move(w);
    return true;
  });
  if (!next.ok()) return std::move(next).error();
  resp.set_next_page_token(*next);
  for (auto& w : *resp.mutable_workspaces()) *w.mutable_network_policy_status() = status_of(w.workspace_id());
  return resp;
}

Result<ctrl::ListConnectionsResponse> WorkspaceService::list_connections(const ctrl::ListConnectionsRequest& req) {
  KIB_TRY_ASSIGN(auto size, effective_page_size(req.page_size()));
  // A token names the last connection ID returned and is bound to the Workspace filter.
  StringMap filter;
  if (!req.workspace_id().empty()) {
    KIB_TRY(require_id<Workspace>(req.workspace_id()));
    KIB_TRY(env_.store.read([&](store::Transaction& txn) -> Status {
      KIB_TRY(must_load<Workspace>(txn, req.workspace_id()));
      return {};
    }));
    filter["workspace_id"] = req.workspace_id();
  }
  const std::string_view kind = "connection";
  KIB_TRY_ASSIGN(auto after, parse_page_token(env_.store.page_token_secret(), kind, req.page_token(), filter));
  KIB_TRY_ASSIGN(auto page, env_.runtime.connections(req.workspace_id(), after, size));
  ctrl::ListConnectionsResponse resp;
  const auto now = env_.clock();
  for (auto& c : page.connections) {
    *c.mutable_open_time() = to_timestamp(now - std::chrono::milliseconds(c.age_ms()));
    *resp.add_connections() = std::move(c);
  }
  if (page.more && !resp.connections().empty())
    resp.set_next_page_token(make_page_token(env_.store.page_token_secret(), kind,
                                             resp.connections(resp.connections_size() - 1).connection_id(), filter));
  return resp;
}

Result<ctrl::UpdateNetworkPolicyResponse> WorkspaceService::update_policy(const ctrl::UpdateNetworkPolicyRequest& req) {
  using Resp = ctrl::UpdateNetworkPolicyResponse;
  uint32_t drain = 0;
  ctrl::Workspace changed;
  auto precheck = [&]() -> Status {
    KIB_TRY(require_id<Workspace>(req.workspace_id()));
    KIB_TRY(require_expected(req.expected_revision(), "expected_revision"));
    KIB_TRY_ASSIGN(auto d, drain_seconds_of(req));
    drain = d;
    return validate_policy_shape(req.network_policy());
  };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY_ASSIGN(Workspace w, must_load<Workspace>(txn, req.workspace_id()));
    uint64_t revision = w.network_policy().revision();
    if (revision != req.expected_revision())
      return Error{Code::aborted, "expected_revision " + std::to_string(req.expected_revision()) +
                                      " does not match the current policy revision " + std::to_string(revision)};
    ctrl::NetworkPolicy next = content_of(req.network_policy());
    // The revision "moves only when the policy's content changes".
    if (!same_content(content_of(w.network_policy()), next)) {
      KIB_TRY(check_policy_refs(txn, next));
      next.set_revision(revision + 1);
      *w.mutable_network_policy() = next;
      *w.mutable_updated_at() = next_updated_at(w.updated_at(), env_.clock());
      KIB_TRY(save(txn, w));
      KIB_TRY(txn.set_refs(w.workspace_id(), policy_refs(next)));
      changed = w;
    }
    Resp resp;
    *resp.mutable_workspace() = std::move(w);
    return resp;
  };
  return with_status(env_.commands.run<Resp>(
      kService + std::string("UpdateNetworkPolicy"), req, req.command_id(), precheck, apply,
      [&] {
    if (!changed.workspace_id().empty()) apply_to_runtime(changed, drain);
      },
      // Its namespace is this Workspace's alone while it exists (creates and deletes,
      // which can hand a namespace from one to another, stay barriers).
      [&] { return req.workspace_id(); }));
}

Result<ctrl::DeleteWorkspaceResponse> WorkspaceService::remove(const ctrl::DeleteWorkspaceRequest& req) {
  using Resp = ctrl::DeleteWorkspaceResponse;
  std::optional<store::PendingDetach> pending;
  auto precheck = [&]() -> Status { return require_id<Workspace>(req.workspace_id()); };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY_ASSIGN(auto cur, must_load<Workspace>(txn, req.workspace_id()));
    KIB_TRY_ASSIGN(auto key, txn.netns_key(req.workspace_id()));
    // Stored with the delete: a crash before the rules are removed leaves the
    // agent a note to remove them at its next start.
    if (key) {
      pending = store::PendingDetach{req.workspace_id(), cur.netns(), *key};
      KIB_TRY(txn.add_pending_detach(*pending));
    }
    KIB_TRY(txn.mark_deleted(store::Kind::workspace, req.workspace_id()));
    KIB_TRY(txn.set_refs(req.workspace_id(), {}));
    return Resp();
  };
  return env_.commands.run<Resp>(kService + std::string("DeleteWorkspace"), req, req.command_id(), precheck, apply,
                                 [&] {
    env_.runtime.workspace_deleted(req.workspace_id());
    {
      std::lock_guard<std::mutex> g(errors_mu_);
      apply_errors_.erase(req.workspace_id());
    }
    if (pending) finish_detach(*pending);
  });
}

Result<ctrl::UpdateWorkspaceLabelsResponse> WorkspaceService::update_labels(
    const ctrl::UpdateWorkspaceLabelsRequest& req) {
  return with_status(update_metadata<Workspace, ctrl::UpdateWorkspaceLabelsResponse>(
      env_.commands, kService + std::string("UpdateWorkspaceLabels"), req, req.workspace_id()));
}

Result<ctrl::UpdateWorkspaceAnnotationsResponse> WorkspaceService::update_annotations(
    const ctrl::UpdateWorkspaceAnnotationsRequest& req) {
  return with_status(update_metadata<Workspace, ctrl::UpdateWorkspaceAnnotationsResponse>(
      env_.commands, kService + std::string("UpdateWorkspaceAnnotations"), req, req.workspace_id()));
}

void WorkspaceService::finish_detach(const store::PendingDetach& p) {
  Status st = env_.runtime.leftovers_removed(p.netns, p.key.dev, p.key.ino);
  if (st.ok())
    st = env_.store.write([&](store::Transaction& txn) { return txn.remove_pending_detach(p.workspace_id); });
  std::lock_guard<std::mutex> g(errors_mu_);
  if (st.ok()) {
    detach_errors_.erase(p.workspace_id);
    return;
  }
  // Logged when it changes, not on every retry.
  auto& last = detach_errors_[p.workspace_id];
  if (last != st.error().message)
    spdlog::warn("workspace {} (deleted): removing the agent's rules from {}: {} (retrying)", p.workspace_id, p.netns,
                 st.error().message);
  last = st.error().message;
}

Status WorkspaceService::finish_pending_detaches() {
  std::vector<store::PendingDetach> pending;
  KIB_TRY(env_.store.write([&](store::Transaction& txn) -> Status {
    KIB_TRY_ASSIGN(auto all, txn.pending_detaches());
    for (auto& p : all) {
      // A Workspace created on that namespace since holds its rules now: leave them.
      KIB_TRY_ASSIGN(auto held, txn.netns_attached(p.key));
      if (held) {
        KIB_TRY(txn.remove_pending_detach(p.workspace_id));
      } else {
        pending.push_back(std::move(p));
      }
    }
    return {};
  }));
  {
    // Notes gone (a Workspace holds the namespace again) are not retried.
    std::lock_guard<std::mutex> g(errors_mu_);
    std::erase_if(detach_errors_, [&](const auto& e) {
      return std::none_of(pending.begin(), pending.end(), [&](const auto& p) { return p.workspace_id == e.first; });
    });
  }
  for (const auto& p : pending) finish_detach(p);
  return {};
}

Status WorkspaceService::publish_all() {
  // First what deleted Workspaces may have left: their namespaces are nobody's.
  if (Status st = finish_pending_detaches(); !st.ok())
    spdlog::warn("removing the rules of deleted Workspaces: {}", st.error().message);
  KIB_TRY_ASSIGN(auto all, load_all<Workspace>(env_.store));
  std::vector<Runtime::Restoring> restoring;
  restoring.reserve(all.size());
  for (const auto& w : all) restoring.push_back({w.workspace_id(), w.netns(), w.network_policy()});
  env_.runtime.workspaces_restoring(restoring);
  // One namespace that is gone is reported in its status, not fatal for the others.
  std::vector<ctrl::Workspace> attached;
  for (auto& w : all)
    if (apply_to_runtime(w, 0)) attached.push_back(std::move(w));
  env_.runtime.workspaces_restored();
  refresh_netns_keys(attached);
  return {};
}

void WorkspaceService::register_methods(MethodRegistry& reg) {
  const std::string s = kService;
  reg.add<ctrl::CreateWorkspaceRequest, ctrl::CreateWorkspaceResponse>(
      s + "CreateWorkspace", [this](const auto& r, const CallContext&) { return create(r); });
  reg.add<ctrl::GetWorkspaceRequest, ctrl::GetWorkspaceResponse>(
      s + "GetWorkspace", [this](const auto& r, const CallContext&) { return get(r); });
  reg.add<ctrl::ListWorkspacesRequest, ctrl::ListWorkspacesResponse>(
      s + "ListWorkspaces", [this](const auto& r, const CallContext&) { return list(r); });
  reg.add<ctrl::UpdateNetworkPolicyRequest, ctrl::UpdateNetworkPolicyResponse>(
      s + "UpdateNetworkPolicy", [this](const auto& r, const CallContext&) { return update_policy(r); });
  reg.add<ctrl::DeleteWorkspaceRequest, ctrl::DeleteWorkspaceResponse>(
      s + "DeleteWorkspace", [this](const auto& r, const CallContext&) { return remove(r); });
  reg.add<ctrl::UpdateWorkspaceLabelsRequest, ctrl::UpdateWorkspaceLabelsResponse>(
      s + "UpdateWorkspaceLabels", [this](const auto& r, const CallContext&) { return update_labels(r); });
  reg.add<ctrl::UpdateWorkspaceAnnotationsRequest, ctrl::UpdateWorkspaceAnnotationsResponse>(
      s + "UpdateWorkspaceAnnotations", [this](const auto& r, const CallContext&) { return update_annotations(r); });
  reg.add<ctrl::ListConnectionsRequest, ctrl::ListConnectionsResponse>(
      s + "ListConnections", [this](const auto& r, const CallContext&) { return list_connections(r); });
}

}  // namespace kib::api
