// Over 400 lines for a reason: the one owner of every Workspace namespace's attachment,
// whose entry lives through attach, restore (prepare/adopt), update, repair and detach
// under one mutex; the steps share the entries, the attach memo and the change watches.
#include "agent/dataplane/netns_attacher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <utility>

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

NetnsAttacher::NetnsAttacher(std::string guest_congestion_control, std::string memo_path)
    : guest_congestion_control_(std::move(guest_congestion_control)), memo_path_(std::move(memo_path)) {
  if (auto own = netns::NamespaceHandle::open("/proc/self/ns/net"); own.ok())
    own_namespace_.emplace(static_cast<uint64_t>(own->dev()), static_cast<uint64_t>(own->ino()));
  if (auto set = netns::ChangeWatchSet::create(); set.ok())
    watches_.emplace(std::move(set.value()));
  else
    spdlog::warn("watching namespaces for changes: {} (each is checked every 2 s instead)", set.error().message);
  if (memo_path_.empty()) return;
  auto boot = netns::current_boot_id();
  if (!boot.ok()) {
    spdlog::warn("{}: every namespace gets its table written again at a start", boot.error().message);
    return;
  }
  boot_id_ = std::move(*boot);
  auto notes = netns::load_attach_notes(memo_path_, boot_id_);
  if (notes.ok())
    inherited_ = std::move(*notes);
  else
    spdlog::warn("{} (ignored: every namespace gets its table written again)", notes.error().message);
}

void NetnsAttacher::note(const std::string& workspace_id, const Entry& e) {
  if (boot_id_.empty()) return;
  // Only a table known to be the agent's write at the generation it was last seen at.
  auto n = e.checked_generation ? e.attachment.note() : std::nullopt;
  if (!n) return drop_note(workspace_id);
  n->generation = *e.checked_generation;
  auto [it, added] = notes_.try_emplace(workspace_id, *n);
  if (!added && it->second == *n) return;
  it->second = *n;
  write_memo([&](netns::AttachMemo& m) { return m.put(workspace_id, *n); });
}

void NetnsAttacher::drop_note(const std::string& workspace_id) {
  if (notes_.erase(workspace_id) == 0) return;
  write_memo([&](netns::AttachMemo& m) { return m.drop(workspace_id); });
}

void NetnsAttacher::write_memo(const std::function<Status(netns::AttachMemo&)>& line) {
  Status st;
  if (!memo_) {
    auto m = netns::AttachMemo::create(memo_path_, boot_id_, notes_);
    if (m.ok()) memo_.emplace(std::move(*m));
    st = m.ok() ? Status{} : Status(std::move(m).error());
  } else if (!memo_intact_) {
    st = memo_->rewrite(notes_);
  } else {
    st = line(*memo_);
    if (st.ok() && memo_->long_for(notes_.size())) st = memo_->rewrite(notes_);
  }
  memo_intact_ = st.ok() && memo_.has_value();
  std::string err = st.ok() ? std::string() : st.error().message;
  if (err != memo_error_ && !err.empty()) spdlog::warn("{} (a start after this one writes the tables again)", err);
  memo_error_ = std::move(err);
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
  std::lock_guard one_at_a_time(attach_mu_);
  if (Status st = attachable(static_cast<uint64_t>(ns->dev()), static_cast<uint64_t>(ns->ino())); !st.ok())
    return Error{st.error().code, "netns " + netns + " " + st.error().message};
  if (auto holder = holder_of(*ns, workspace_id); !holder.empty())
    return Error{Code::failed_precondition,
                 "netns " + netns + ": its network namespace is already attached to workspace " + holder};
  std::optional<netns::ChangeWatch> watch;
  std::optional<netns::Attachment> a;
  bool check_first = true;  // the first repair pass checks it, whatever the watch says
  if (auto ready = claim_prepared(workspace_id, *ns, rp.value(), tcp_listeners)) {
    a.emplace(std::move(ready->attachment));
    watch = std::move(ready->watch);
    check_first = !watch;  // watched since before the adoption read the kernel
  } else {
    netns::AttachParams params;
    params.policy = std::move(rp.value());
    params.listeners_per_family = tcp_listeners;
    params.guest_congestion_control = guest_congestion_control_;
    auto attached = netns::Attachment::attach(std::move(*ns), params);
    if (!attached.ok()) return std::move(attached).error();
    a.emplace(std::move(attached.value()));
  }
  WorkspaceListeners out = taken_listeners(*a);
  // Opened after the writes above, outside mu_ (a thread enters the namespace); the
  // first repair checks the namespace whatever the watch reports.
  if (!watch && watches_) {
    auto w = netns::ChangeWatch::open(a->ns().fd(), watched_objects());
    if (w.ok())
      watch.emplace(std::move(w.value()));
    else
      spdlog::warn("workspace {}: watching its namespace for changes: {} (checked every 2 s instead)", workspace_id,
                   w.error().message);
  }
  std::unique_lock lk(mu_);
  settled(lk, workspace_id);
  forget(workspace_id);
  const uint64_t key = next_key_++;
  // The table as the agent's own write left it: the check its own notification asks
  // for looks at the routing, and lists the table only if another write followed.
  const auto written = a->written_generation();
  Entry e{std::move(*a), key,   check_first, next_sweep(std::chrono::steady_clock::now(), key),
          written,       false, std::nullopt};
  if (watch) {
    if (Status st = watches_->add(e.key, std::move(*watch)); !st.ok()) {
      e.changed = true;
      spdlog::warn("workspace {}: watching its namespace for changes: {} (checked every 2 s instead)", workspace_id,
                   st.error().message);
    }
  }
  note(workspace_id, entries_.emplace(workspace_id, std::move(e)).first->second);
  return out;
}

// Adoptions (attach_memo.h) need no order among themselves: at a start they run on a
// few threads at once, ahead of the attach() calls that the runtime makes one by one
// in store order (which keep the checks that need it: holder_of, attachable). At
// 2,000 Workspaces this halves the time until all are enforced again on 2 cores.
void NetnsAttacher::prepare(const std::vector<Runtime::Restoring>& all, unsigned tcp_listeners) {
  std::vector<std::pair<const Runtime::Restoring*, netns::AttachNote>> work;
  {
    std::lock_guard lk(mu_);
    for (const auto& w : all) {
      auto it = inherited_.find(w.workspace_id);
      if (it == inherited_.end()) continue;
      work.emplace_back(&w, it->second);
    }
    inherited_.clear();  // used once: the rest name Workspaces no longer stored
  }
  if (work.empty()) return;
  const unsigned threads = std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4);
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) prepare_one(*work[i].first, work[i].second, tcp_listeners);
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads && i < work.size(); ++i) {
    try {
      pool.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // fewer threads: the ones running take all the work
    }
  }
  run();
  for (auto& t : pool) t.join();
}

void NetnsAttacher::prepare_one(const Runtime::Restoring& w, const netns::AttachNote& note, unsigned tcp_listeners) {
  auto rp = netns::ruleset_policy_from_proto(w.policy);
  auto ns = netns::NamespaceHandle::open(w.netns);
  // attach() reports what is wrong with these.
  if (!rp.ok() || !ns.ok() || !attachable(static_cast<uint64_t>(ns->dev()), static_cast<uint64_t>(ns->ino())).ok())
    return;
  netns::AttachParams params;
  params.policy = std::move(rp.value());
  params.listeners_per_family = tcp_listeners;
  params.guest_congestion_control = guest_congestion_control_;
  // Watched before adopt() reads the kernel: a change after its reads is reported, so
  // the namespace needs no check of its own after the start (with 2,000 of them, a
  // pass that checks them all takes seconds).
  std::optional<netns::ChangeWatch> watch;
  auto subscribe = [&] {
    if (!watches_) return;
    if (auto opened = netns::ChangeWatch::open_here(watched_objects()); opened.ok())
      watch.emplace(std::move(opened.value()));
  };
  auto a = netns::Attachment::adopt(std::move(*ns), params, note, subscribe);
  if (!a.ok()) {
    spdlog::info("workspace {}: writing its rules again: {}", w.workspace_id, a.error().message);
    return;
  }
  std::lock_guard lk(mu_);
  prepared_.emplace(w.workspace_id, Prepared{std::move(a.value()), std::move(watch), tcp_listeners});
}

std::optional<NetnsAttacher::Prepared> NetnsAttacher::claim_prepared(const std::string& workspace_id,
                                                                     const netns::NamespaceHandle& ns,
                                                                     const netns::RulesetPolicy& policy,
                                                                     unsigned tcp_listeners) {
  std::optional<Prepared> p;
  {
    std::lock_guard lk(mu_);
    auto it = prepared_.find(workspace_id);
    if (it == prepared_.end()) return std::nullopt;
    p.emplace(std::move(it->second));
    prepared_.erase(it);
  }
  // The store changed between prepare() and now, or the path names another namespace.
  const auto& held = p->attachment.ns();
  if (held.path() != ns.path() || held.dev() != ns.dev() || held.ino() != ns.ino() ||
      p->tcp_listeners != tcp_listeners || !p->attachment.table_is_for(policy))
    return std::nullopt;
  return p;
}

void NetnsAttacher::end_prepared() {
  std::lock_guard lk(mu_);
  prepared_.clear();  // closes their listeners; the tables stay, and drop
}

const NetnsAttacher::Entry* NetnsAttacher::settled(std::unique_lock<std::mutex>& lk,
                                                   const std::string& workspace_id) const {
  for (;;) {
    auto it = entries_.find(workspace_id);
    if (it == entries_.end()) return nullptr;
    if (!it->second.busy) return &it->second;
    settled_.wait(lk);
  }
}

void NetnsAttacher::forget(const std::string& workspace_id) {
  auto it = entries_.find(workspace_id);
  if (it == entries_.end()) return;
  if (watches_) watches_->remove(it->second.key);
  reported_.erase(it->second.key);
  entries_.erase(it);
  drop_note(workspace_id);
}

void NetnsAttacher::note_changes() {
  if (!watches_) return;
  auto reported = watches_->changed();
  if (!reported.ok()) {
    // Cannot tell what changed: check everything.
    for (auto& [id, e] : entries_) e.changed = true;
    return;
  }
  for (const auto& [key, r] : *reported) {
    netns::WatchReport& all = reported_[key];
    all.routing = all.routing || r.routing;
    if (r.nft) all.nft_generation = r.nft_generation;  // the latest transaction read
    all.nft = all.nft || r.nft;
  }
}

// Two Workspaces in one namespace would install, and remove, the same table: the
// second one's delete would leave the first one's guest without rules. The store
// refuses such a create by the identity it keeps; this also covers paths that came
// to name another Workspace's namespace while the agent was down. Attaches run one at
// a time (attach_mu_), so the check and the insert do not race.
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
  std::unique_lock lk(mu_);
  Entry* e = settled(lk, workspace_id);
  if (!e) return Error{Code::failed_precondition, "workspace is not attached"};
  // The writes run outside mu_ (a map node stays put; a busy one is not erased).
  e->busy = true;
  lk.unlock();
  Status st = e->attachment.update(rp.value());
  // The policy is in force either way; a sweep that failed is logged.
  if (Status swept = st.ok() ? e->attachment.end_uncovered_time_wait() : Status{}; !swept.ok())
    spdlog::warn("workspace {}: {}", workspace_id, swept.error().message);
  lk.lock();
  e->busy = false;
  settled_.notify_all();
  if (!st.ok()) return std::move(st).error();
  e->checked_generation = e->attachment.written_generation();  // as in attach()
  note(workspace_id, *e);
  return taken_listeners(e->attachment);
}

void NetnsAttacher::detach(const std::string& workspace_id) {
  std::unique_lock lk(mu_);
  Entry* e = settled(lk, workspace_id);
  if (!e) return;
  // The workspace is gone either way; what could not be removed is logged.
  if (Status st = e->attachment.detach(); !st.ok())
    spdlog::warn("workspace {}: detaching its namespace: {}", workspace_id, st.error().message);
  forget(workspace_id);
}

void NetnsAttacher::release(const std::string& workspace_id) {
  std::unique_lock lk(mu_);
  settled(lk, workspace_id);
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
  std::unique_lock lk(mu_);
  const Entry* e = settled(lk, workspace_id);
  if (!e) return "workspace is not attached";
  if (!e->attachment.namespace_alive()) return "network namespace is gone";
  return e->attachment.family_error();
}

std::vector<std::string> NetnsAttacher::enforced_families(const std::string& workspace_id) const {
  std::unique_lock lk(mu_);
  const Entry* e = settled(lk, workspace_id);
  if (!e || !e->attachment.namespace_alive()) return {};
  return netns::family_names(e->attachment.enforced_families());
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
      if (auto r = reported_.find(e.key); r != reported_.end()) {
        if (r->second.routing) e.changed = true;
        if (r->second.nft && !e.nft_reported) e.reported_generation = r->second.nft_generation;
        if (r->second.nft && e.nft_reported && e.reported_generation != r->second.nft_generation)
          e.reported_generation.reset();  // two reports naming different generations: read it
        e.nft_reported = e.nft_reported || r->second.nft;
        reported_.erase(r);
      }
      if (e.changed || e.nft_reported || now >= e.next_sweep) due.push_back(id);
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

// Once update() is done with it (settled()): a policy swap and a repair never
// interleave, and the table put back is the policy in force. Only a namespace that
// reported a change (netns/change_watch.h), has no watch, failed its last check, or
// is due for the backstop sweep is looked at; the rest cost a map lookup. One whose nftables alone
// reported, still at the generation last found in place (the agent's own write:
// each is followed by such a report), costs a generation read and nothing more. A
// checked namespace's table is listed (~1.7 ms, compared with what the agent's last
// write left) only when its nftables generation moved since it was last found in
// place; the policy routing every time.
WorkspaceAttacher::Repair NetnsAttacher::repair(const std::string& workspace_id) {
  std::unique_lock lk(mu_);
  Entry* found = settled(lk, workspace_id);
  if (!found) return {};
  // repairs_needed() read the sockets and chose this Workspace as due: checked now.
  const auto now = std::chrono::steady_clock::now();
  Entry& e = *found;
  // Only nftables reported (typically the agent's own write), nothing else is due:
  // when the generation is the one last found in place, nothing changed at all.
  const bool nft_only = e.nft_reported && !e.changed && now < e.next_sweep;
  const auto reported_generation = std::exchange(e.reported_generation, std::nullopt);
  e.nft_reported = false;
  // The report named the generation last found in place: nothing but what the agent
  // wrote (or a transaction that changed nothing) happened there. No syscall at all.
  if (nft_only && reported_generation && reported_generation == e.checked_generation && watches_ &&
      watches_->contains(e.key))
    return {};
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
  auto gen = netns::nft_generation(e.attachment.ns().fd());
  const bool untouched = gen.ok() && e.checked_generation == *gen;
  if (nft_only && untouched && watched) return {};
  e.next_sweep = next_sweep(now, e.key);
  Status checked = untouched ? e.attachment.check_routing() : e.attachment.check();
  if (checked.ok()) {
    if (gen.ok()) e.checked_generation = *gen;
    note(workspace_id, e);
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
  // Not adoptable until a check finds the table put back in place.
  drop_note(workspace_id);
  return {checked.error().message, e.attachment.reinstall(), {}};
}

}  // namespace kib::dataplane
