#include "agent/dataplane/netns_attacher.h"

#include <spdlog/spdlog.h>

#include "netns/namespace_handle.h"
#include "netns/nft_generation.h"
#include "netns/policy_from_proto.h"

namespace kib::dataplane {

NetnsAttacher::NetnsAttacher(std::string guest_congestion_control)
    : guest_congestion_control_(std::move(guest_congestion_control)) {
  if (auto own = netns::NamespaceHandle::open("/proc/self/ns/net"); own.ok())
    own_namespace_.emplace(static_cast<uint64_t>(own->dev()), static_cast<uint64_t>(own->ino()));
}

Status NetnsAttacher::attachable(uint64_t dev, uint64_t ino) const {
  if (own_namespace_ == std::pair{dev, ino})
    return Error{Code::failed_precondition,
                 "is the agent's own network namespace (its rules would catch the host's traffic)"};
  return {};
}

Result<WorkspaceListeners> NetnsAttacher::attach(const std::string& workspace_id, const std::string& netns,
                                                 const ::kibotos::ctrl::v1::NetworkPolicy& policy,
                                                 unsigned loops) {
  auto rp = netns::ruleset_policy_from_proto(policy);
  if (!rp.ok()) return std::move(rp).error();
  auto ns = netns::NamespaceHandle::open(netns);
  if (!ns.ok()) return std::move(ns).error();
  if (Status st = attachable(static_cast<uint64_t>(ns->dev()), static_cast<uint64_t>(ns->ino())); !st.ok())
    return Error{st.error().code, "netns " + netns + " " + st.error().message};
  if (auto holder = holder_of(*ns, workspace_id); !holder.empty())
    return Error{Code::failed_precondition,
                 "netns " + netns + ": its network namespace is already attached to workspace " + holder};
  netns::AttachParams params;
  params.policy = std::move(rp.value());
  params.listeners_per_family = loops;
  params.guest_congestion_control = guest_congestion_control_;
  auto a = netns::Attachment::attach(std::move(*ns), params);
  if (!a.ok()) return std::move(a).error();
  netns::Listeners all = a->take_listeners();
  WorkspaceListeners out;
  out.v4 = std::move(all.tcp.v4);
  out.v6 = std::move(all.tcp.v6);
  for (auto* set : {&all.dns_udp, &all.dns_tcp}) {
    auto& dst = set == &all.dns_udp ? out.dns_udp : out.dns_tcp;
    for (auto& fd : set->v4) dst.push_back(std::move(fd));
    for (auto& fd : set->v6) dst.push_back(std::move(fd));
  }
  std::lock_guard lk(mu_);
  entries_.erase(workspace_id);
  entries_.emplace(workspace_id, Entry{std::move(a.value()), std::nullopt});
  return out;
}

// Two Workspaces in one namespace would install, and remove, the same table: the
// second one's delete would leave the first one's guest without rules. The store
// refuses such a create by the identity it keeps; this also covers paths that came
// to name another Workspace's namespace while the agent was down. The runtime calls
// attach in store order, one at a time, so the check and the insert do not race.
std::string NetnsAttacher::holder_of(const netns::NamespaceHandle& ns, const std::string& except) const {
  std::lock_guard lk(mu_);
  for (const auto& [id, e] : entries_) {
    const auto& held = e.attachment.ns();
    if (id != except && held.dev() == ns.dev() && held.ino() == ns.ino()) return id;
  }
  return {};
}

Status NetnsAttacher::update(const std::string& workspace_id, const ::kibotos::ctrl::v1::NetworkPolicy& policy) {
  auto rp = netns::ruleset_policy_from_proto(policy);
  if (!rp.ok()) return std::move(rp).error();
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return Error{Code::failed_precondition, "workspace is not attached"};
  KIB_TRY(it->second.attachment.update(rp.value()));
  // The policy is in force either way; a sweep that failed is logged.
  if (Status st = it->second.attachment.end_uncovered_time_wait(); !st.ok())
    spdlog::warn("workspace {}: {}", workspace_id, st.error().message);
  return {};
}

void NetnsAttacher::detach(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return;
  // The workspace is gone either way; what could not be removed is logged.
  if (Status st = it->second.attachment.detach(); !st.ok())
    spdlog::warn("workspace {}: detaching its namespace: {}", workspace_id, st.error().message);
  entries_.erase(it);
}

void NetnsAttacher::release(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  entries_.erase(workspace_id);  // closes our fds only: the table stays in the kernel
}

bool NetnsAttacher::moved(const std::string& workspace_id) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  return it != entries_.end() && !it->second.attachment.namespace_alive();
}

Status NetnsAttacher::remove_leftovers(const std::string& netns, uint64_t dev, uint64_t ino) {
  auto ns = netns::NamespaceHandle::open(netns);
  // Gone, or not a namespace: nothing of the agent's is reachable there any more.
  if (!ns.ok()) return {};
  // The path names another namespace now: what it has is not ours to remove.
  if (static_cast<uint64_t>(ns->dev()) != dev || static_cast<uint64_t>(ns->ino()) != ino) return {};
  // A Workspace holds it (a stale identity that names a namespace again): the table
  // there is that Workspace's.
  if (!holder_of(*ns, {}).empty()) return {};
  netns::AttachParams params;  // the table, rules and routes are found by name and mark
  return netns::Attachment::remove_stale(netns, params);
}

std::string NetnsAttacher::health(const std::string& workspace_id) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return "workspace is not attached";
  if (!it->second.attachment.namespace_alive()) return "network namespace is gone";
  return {};
}

// Under mu_, like update(): a policy swap and a repair never interleave, and the
// table put back is the policy in force. Listing the table through libnftables costs
// ~1.7 ms here, so it is listed (and compared with what the agent's last write left)
// only when the namespace's nftables generation moved since it was last found in
// place; the policy routing is looked at every time.
WorkspaceAttacher::Repair NetnsAttacher::repair(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end() || !it->second.attachment.namespace_alive()) return {};
  Entry& e = it->second;
  auto gen = netns::nft_generation(e.attachment.ns().fd());
  const bool untouched = gen.ok() && e.checked_generation == *gen;
  Status checked = untouched ? e.attachment.check_routing() : e.attachment.check();
  if (checked.ok()) {
    if (gen.ok()) e.checked_generation = *gen;
    return {};
  }
  // The generation is left as it was: the next check lists the table put back once
  // more, which also covers a write that another transaction interleaved with.
  return {checked.error().message, e.attachment.reinstall()};
}

}  // namespace kib::dataplane
