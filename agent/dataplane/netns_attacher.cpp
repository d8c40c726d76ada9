#include "agent/dataplane/netns_attacher.h"

#include <spdlog/spdlog.h>

#include "netns/namespace_handle.h"
#include "netns/nft_generation.h"
#include "netns/nft_ruleset.h"
#include "netns/policy_from_proto.h"

namespace kib::dataplane {
namespace {

// The backstop behind the change notifications: each namespace is also checked this
// often without one, in case a change slipped through (a kernel path that does not
// notify). Spread over up to a quarter of the period by key, so namespaces attached
// together are not all swept in one pass. At 2,000 namespaces it costs 0.1-0.25% of
// a core (a check takes 0.3-0.7 ms of CPU); every 60 s it would be 1-2.3%, more
// than the whole budget of issue 26 (1% of a core).
constexpr std::chrono::milliseconds kSweepPeriod = std::chrono::minutes(10);

std::chrono::steady_clock::time_point next_sweep(std::chrono::steady_clock::time_point now, uint64_t key) {
  return now + kSweepPeriod - kSweepPeriod * static_cast<int64_t>(key % 64) / 256;
}

// The listeners the attachment holds, handed to the data plane; the DNS ones come
// with the namespace's fd (shared: the DNS service opens reply sockets there).
WorkspaceListeners taken_listeners(netns::Attachment& a) {
  netns::Listeners all = a.take_listeners();
  WorkspaceListeners out;
  out.v4 = std::move(all.tcp.v4);
  out.v6 = std::move(all.tcp.v6);
  for (auto* set : {&all.dns_udp, &all.dns_tcp}) {
    auto& dst = set == &all.dns_udp ? out.dns_udp : out.dns_tcp;
    for (auto& fd : set->v4) dst.push_back(std::move(fd));
    for (auto& fd : set->v6) dst.push_back(std::move(fd));
  }
  if (!out.dns_udp.empty() || !out.dns_tcp.empty()) out.netns = a.ns().shared_fd();
  return out;
}

// What the agent installs (AttachParams' defaults, as attach() uses them).
netns::WatchedObjects watched_objects() { return {netns::kTableName, netns::kDefaultRouteTable}; }

}  // namespace

NetnsAttacher::NetnsAttacher(std::string guest_congestion_control)
    : guest_congestion_control_(std::move(guest_congestion_control)) {
  if (auto own = netns::NamespaceHandle::open("/proc/self/ns/net"); own.ok())
    own_namespace_.emplace(static_cast<uint64_t>(own->dev()), static_cast<uint64_t>(own->ino()));
  if (auto set = netns::ChangeWatchSet::create(); set.ok())
    watches_.emplace(std::move(set.value()));
  else
    spdlog::warn("watching namespaces for changes: {} (each is checked every 2 s instead)", set.error().message);
}

Status NetnsAttacher::attachable(uint64_t dev, uint64_t ino) const {
  if (own_namespace_ == std::pair{dev, ino})
    return Error{Code::failed_precondition,
                 "is the agent's own network namespace (its rules would catch the host's traffic)"};
  return {};
}

Result<WorkspaceListeners> NetnsAttacher::attach(const std::string& workspace_id, const std::string& netns,
                                                 const ::kibotos::ctrl::v1::NetworkPolicy& policy,
                                                 unsigned tcp_listeners) {
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
  params.listeners_per_family = tcp_listeners;
  params.guest_congestion_control = guest_congestion_control_;
  auto a = netns::Attachment::attach(std::move(*ns), params);
  if (!a.ok()) return std::move(a).error();
  WorkspaceListeners out = taken_listeners(*a);
  // Opened after the writes above, outside mu_ (a thread enters the namespace); the
  // first repair checks the namespace whatever the watch reports.
  auto w = watches_ ? netns::ChangeWatch::open(a->ns().fd(), watched_objects())
                    : Result<netns::ChangeWatch>(Error{Code::unavailable, "no epoll set"});
  std::lock_guard lk(mu_);
  forget(workspace_id);
  const uint64_t key = next_key_++;
  // The table as the agent's own write left it: the check its own notification asks
  // for looks at the routing, and lists the table only if another write followed.
  const auto written = a->written_generation();
  Entry e{std::move(a.value()), key, true, next_sweep(std::chrono::steady_clock::now(), key), written};
  if (w.ok()) {
    if (Status st = watches_->add(e.key, std::move(w.value())); !st.ok())
      spdlog::warn("workspace {}: watching its namespace for changes: {} (checked every 2 s instead)", workspace_id,
                   st.error().message);
  } else if (watches_) {
    spdlog::warn("workspace {}: watching its namespace for changes: {} (checked every 2 s instead)", workspace_id,
                 w.error().message);
  }
  entries_.emplace(workspace_id, std::move(e));
  return out;
}

void NetnsAttacher::forget(const std::string& workspace_id) {
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return;
  if (watches_) watches_->remove(it->second.key);
  changed_keys_.erase(it->second.key);
  entries_.erase(it);
}

void NetnsAttacher::note_changes() {
  if (!watches_) return;
  auto keys = watches_->changed();
  if (!keys.ok()) {
    // Cannot tell what changed: check everything.
    for (auto& [id, e] : entries_) e.changed = true;
    return;
  }
  changed_keys_.insert(keys->begin(), keys->end());
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

Result<WorkspaceListeners> NetnsAttacher::update(const std::string& workspace_id,
                                                 const ::kibotos::ctrl::v1::NetworkPolicy& policy) {
  auto rp = netns::ruleset_policy_from_proto(policy);
  if (!rp.ok()) return std::move(rp).error();
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return Error{Code::failed_precondition, "workspace is not attached"};
  KIB_TRY(it->second.attachment.update(rp.value()));
  it->second.checked_generation = it->second.attachment.written_generation();  // as in attach()
  // The policy is in force either way; a sweep that failed is logged.
  if (Status st = it->second.attachment.end_uncovered_time_wait(); !st.ok())
    spdlog::warn("workspace {}: {}", workspace_id, st.error().message);
  return taken_listeners(it->second.attachment);
}

void NetnsAttacher::detach(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return;
  // The workspace is gone either way; what could not be removed is logged.
  if (Status st = it->second.attachment.detach(); !st.ok())
    spdlog::warn("workspace {}: detaching its namespace: {}", workspace_id, st.error().message);
  forget(workspace_id);
}

void NetnsAttacher::release(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  forget(workspace_id);  // closes our fds only: the table stays in the kernel
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
  return it->second.attachment.family_error();
}

std::vector<std::string> NetnsAttacher::enforced_families(const std::string& workspace_id) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end() || !it->second.attachment.namespace_alive()) return {};
  return netns::family_names(it->second.attachment.enforced_families());
}

// The due Workspaces are picked under mu_ (a walk over the entries, no syscall but one
// epoll_wait), then repaired one by one, each under mu_ as repair() takes it, so that
// status calls and attaches wait for one check at most, not for a whole pass.
std::optional<std::vector<std::pair<std::string, WorkspaceAttacher::Repair>>> NetnsAttacher::repairs_needed() {
  std::vector<std::string> due;
  {
    std::lock_guard lk(mu_);
    const auto now = std::chrono::steady_clock::now();
    note_changes();
    for (auto& [id, e] : entries_) {
      if (changed_keys_.erase(e.key) != 0) e.changed = true;
      if (e.changed || now >= e.next_sweep) due.push_back(id);
    }
  }
  std::vector<std::pair<std::string, Repair>> out;
  out.reserve(due.size());
  for (auto& id : due) {
    Repair r = repair(id);
    out.emplace_back(std::move(id), std::move(r));
  }
  return out;
}

// Under mu_, like update(): a policy swap and a repair never interleave, and the
// table put back is the policy in force. Only a namespace that reported a change
// (netns/change_watch.h: the agent's own writes count too, so each is followed by one
// check), has no watch, failed its last check, or is due for the backstop sweep is
// checked; the rest cost a map lookup. A checked namespace's table is listed
// (~1.7 ms, compared with what the agent's last write left) only when its nftables
// generation moved since it was last found in place; the policy routing every time.
WorkspaceAttacher::Repair NetnsAttacher::repair(const std::string& workspace_id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return {};
  // repairs_needed() read the sockets and chose this Workspace as due: checked now.
  const auto now = std::chrono::steady_clock::now();
  Entry& e = it->second;
  changed_keys_.erase(e.key);
  // Only now: a path that names another namespace is moved() (stat'd every pass).
  if (!e.attachment.namespace_alive()) return {};
  bool watched = watches_ && watches_->contains(e.key);
  if (watches_ && !watched) {
    // Opened before the check below, so nothing after the check goes unreported.
    if (auto w = netns::ChangeWatch::open(e.attachment.ns().fd(), watched_objects()); w.ok())
      watched = watches_->add(e.key, std::move(w.value())).ok();
  }
  // Cleared before the check: a change from here on is queued on the sockets.
  e.changed = !watched;
  e.next_sweep = next_sweep(now, e.key);
  auto gen = netns::nft_generation(e.attachment.ns().fd());
  const bool untouched = gen.ok() && e.checked_generation == *gen;
  Status checked = untouched ? e.attachment.check_routing() : e.attachment.check();
  if (checked.ok()) {
    if (gen.ok()) e.checked_generation = *gen;
    return {};
  }
  // A check that could not run (no fd for a socket, no helper) says nothing about the
  // namespace: nothing is put back, and it is checked again next pass.
  if (checked.error().code == Code::resource_exhausted) {
    e.changed = true;
    return {{}, {}, "could not check its rules: " + checked.error().message};
  }
  // Checked again next pass whether putting it back works or not. The generation is
  // left as it was: the next check lists the table put back once more, which also
  // covers a write that another transaction interleaved with.
  e.changed = true;
  return {checked.error().message, e.attachment.reinstall(), {}};
}

}  // namespace kib::dataplane
