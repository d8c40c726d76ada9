// About 400 lines: the runtime's three jobs over one set of Workers and one mutex:
// publishing (Egress revisions, Workspace plans and their placement on loops),
// collecting the loops' acknowledgements, and reporting status, counts and metrics.
#include "agent/dataplane/dataplane_runtime.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "agent/relay/dial_target.h"
#include "netns/transparent_listener.h"
#include "uring/probe.h"

namespace kib::dataplane {

namespace {

// The status error of a workspace the data plane does not hold (it has no DNS either).
constexpr char kNotAttached[] = "workspace is not attached";

// Each relayed connection costs two fds; ask for the hard limit.
void raise_nofile_limit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Slots per loop for direct-descriptor upstream sockets: as many as the fd limit
// allows (the kernel's bound) up to max_connections, capped so an idle loop's table
// stays small (8 bytes a slot, kernel memory); beyond, a loop falls back to fds.
uint32_t direct_slots_per_loop(const Config& config) {
  constexpr uint32_t kCap = 65536;
  if (!config.dataplane.direct_descriptors) return 0;
  if (Status st = uring::probe_direct_sockets(); !st.ok()) {
    spdlog::info("data plane: upstream sockets use plain fds (no io_uring direct descriptors: {})", st.error().message);
    return 0;
  }
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  uint64_t n = std::min<uint64_t>({rl.rlim_cur, config.dataplane.max_connections, kCap});
  spdlog::info("data plane: upstream sockets use io_uring direct descriptors ({} slots per loop)", n);
  return static_cast<uint32_t>(n);
}

uint64_t min_of(const std::vector<uint64_t>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

// A counter the loops move up and down, read while they run.
uint64_t non_negative(const std::atomic<int64_t>& n) { return static_cast<uint64_t>(std::max<int64_t>(0, n.load())); }

google::protobuf::Timestamp to_timestamp(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  google::protobuf::Timestamp ts;
  ts.set_seconds(us / 1000000);
  ts.set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  return ts;
}

// Adds st's counts to out (every reason and cause present).
void add_counters(const EgressStats& st, ctrl::ConnectionCounters& out) {
  out.set_opened(out.opened() + st.opened.load());
  for (size_t i = 0; i < relay::kCloseReasonCount; ++i)
    (*out.mutable_closed())[std::string(relay::close_reason_name(static_cast<relay::CloseReason>(i)))] +=
        st.closed[i].load();
  for (size_t i = 0; i < relay::kDialCauseCount; ++i)
    (*out.mutable_dial_failures())[std::string(relay::dial_cause_name(static_cast<relay::DialCause>(i)))] +=
        st.dial_failed_by[i].load();
  out.set_bytes_from_guest(out.bytes_from_guest() + st.traffic.from_guest.load());
  out.set_bytes_to_guest(out.bytes_to_guest() + st.traffic.to_guest.load());
}

std::vector<std::pair<std::string, uint64_t>> closed_counts(const EgressStats& st) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < relay::kCloseReasonCount; ++i)
    out.emplace_back(relay::close_reason_name(static_cast<relay::CloseReason>(i)), st.closed[i].load());
  return out;
}

std::vector<std::pair<std::string, uint64_t>> dial_cause_counts(const EgressStats& st) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < relay::kDialCauseCount; ++i)
    out.emplace_back(relay::dial_cause_name(static_cast<relay::DialCause>(i)), st.dial_failed_by[i].load());
  return out;
}

}  // namespace

Result<std::unique_ptr<DataplaneRuntime>> DataplaneRuntime::create(const Config& config, WorkspaceAttacher& attacher) {
  KIB_TRY(uring::probe_kernel_features());
  if (const std::string& cc = config.dataplane.guest_congestion_control; !cc.empty()) {
    if (Status st = netns::check_tcp_congestion_control(cc); !st.ok())
      return Error{Code::invalid_argument, "dataplane.guest_congestion_control: " + st.error().message};
  }
  KIB_TRY_ASSIGN(auto addr, policy::EndpointAddressPolicy::from_strings(config.egress.allowed_special_purpose_cidrs));
  raise_nofile_limit();
  std::unique_ptr<DataplaneRuntime> rt(new DataplaneRuntime(config, attacher, std::move(addr)));
  rt->worker_opts_.loop.file_slots = direct_slots_per_loop(config);
  if (!config.access_log.path.empty()) {
    KIB_TRY_ASSIGN(rt->access_log_, AccessLog::open(config.access_log.path, config.access_log.max_lines_per_second));
    rt->worker_opts_.access_log = rt->access_log_.get();
    spdlog::info("access log: one line per guest connection to {}", config.access_log.path);
  }
  unsigned n =
      config.dataplane.threads != 0 ? config.dataplane.threads : std::max(1u, std::thread::hardware_concurrency());
  dns::DnsServiceOptions dopts;
  dopts.handshake_ms = rt->worker_opts_.timeouts.handshake_ms;
  dopts.resolver = rt->worker_opts_.resolver;
  dns::WorkspaceDnsOptions& wo = dopts.workspace;  // config `dns:` section
  wo.max_in_flight = config.dns.max_in_flight;
  wo.attempt_timeout = config.dns.query_timeout;
  wo.reply_sockets = config.dns.reply_sockets;
  wo.max_guest_tcp_connections = config.dns.max_guest_tcp_connections;
  wo.channel_idle_ms = static_cast<uint64_t>(config.dns.upstream_idle_timeout.count());
  wo.guest_tcp_idle_ms = static_cast<uint64_t>(config.dns.guest_tcp_idle_timeout.count());
  KIB_TRY_ASSIGN(auto dns, dns::DnsService::start(dopts, rt->address_policy_, {}));
  rt->dns_ = std::move(dns);
  relay::ProbeOptions probe;
  probe.address_policy = rt->address_policy_;
  probe.resolver = rt->worker_opts_.resolver;
  rt->prober_ = std::make_unique<PipeliningProber>(probe);
  const auto interval = std::max(std::chrono::seconds(1), config.dataplane.egress_probe_interval);
  DataplaneRuntime* self = rt.get();
  rt->health_prober_ =
      std::make_unique<EgressHealthProber>(std::move(probe), interval, [self] { return self->egresses_in_use(); });
  for (unsigned i = 0; i < n; ++i) {
    WorkerHost& host = *rt;
    auto w = std::make_unique<Worker>(i, host, rt->worker_opts_);
    KIB_TRY(w->start());
    rt->workers_.push_back(std::move(w));
  }
  // More than there are loops means all of them (the count of cores differs between
  // hosts; the config check cannot know it).
  rt->workspace_loops_ = std::clamp(config.dataplane.workspace_loops, 1u, n);
  rt->loop_workspaces_.assign(n, 0);
  spdlog::info("data plane: {} loops; each Workspace's connections are accepted on {} of them", n,
               rt->workspace_loops_);
  return rt;
}

DataplaneRuntime::DataplaneRuntime(const Config& config, WorkspaceAttacher& attacher,
                                   policy::EndpointAddressPolicy addr)
    : attacher_(attacher), address_policy_(std::move(addr)) {
  worker_opts_.timeouts.connect_ms = static_cast<uint64_t>(config.dataplane.connect_timeout.count()) * 1000;
  worker_opts_.timeouts.handshake_ms = static_cast<uint64_t>(config.dataplane.handshake_timeout.count()) * 1000;
  worker_opts_.timeouts.idle_ms = static_cast<uint64_t>(config.dataplane.idle_timeout.count()) * 1000;
  worker_opts_.timeouts.splice_coalesce_us = config.dataplane.splice_coalesce_us;
  worker_opts_.max_connections = config.dataplane.max_connections;
  worker_opts_.max_connections_per_workspace = config.dataplane.max_connections_per_workspace;
  worker_opts_.total_connections = &total_connections_;
  worker_opts_.inherited_connections = &inherited_connections_;
  // From the wall clock in µs: a later process's IDs start above an earlier one's
  // (unless that one named more than a connection per µs on average).
  next_connection_id_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  worker_opts_.next_connection_id = &next_connection_id_;
  worker_opts_.address_policy = &address_policy_;
  worker_opts_.resolver.servers = config.egress.resolvers;
  worker_opts_.resolver.timeout = config.egress.resolve_timeout;
}

DataplaneRuntime::~DataplaneRuntime() {
  health_prober_.reset();
  for (auto& w : workers_) w->stop();
  dns_.reset();
  // No detach: while the agent is stopped the namespaces keep their tables, which
  // drop covered traffic (fail closed). Only workspace_deleted removes them.
}

void DataplaneRuntime::egress_published(EgressRevisionPtr rev, uint32_t drain_seconds) {
  const std::string id = rev->egress_id;
  const uint64_t revision = rev->revision;
  std::shared_ptr<relay::DialTimings> timings;
  {
    std::lock_guard lk(mu_);
    auto& slot = timings_[id];
    if (!slot) slot = std::make_shared<relay::DialTimings>();
    timings = slot;
  }
  auto t = relay::make_dial_target(std::move(rev), std::move(timings));
  if (!t.ok()) {
    // The store validated the spec; a failure here (e.g. an unreadable ca_cert) leaves
    // the previous revision in place, reported through dial errors.
    std::lock_guard lk(mu_);
    for (auto& [wid, e] : workspaces_)
      e.stats->egress(id)->record_failure("revision " + std::to_string(revision) + ": " + t.error().message);
    return;
  }
  {
    std::lock_guard lk(mu_);
    egress_acks_.try_emplace(id, std::vector<uint64_t>(workers_.size(), 0));
    targets_[id] = t.value();
    if (!health_[id]) health_[id] = std::make_shared<EgressHealth>();
  }
  for (auto& w : workers_) w->publish_egress(t.value(), drain_seconds);
  if (dns_) dns_->publish_egress(t.value(), drain_seconds);
  if (prober_) prober_->probe(t.value());
}

void DataplaneRuntime::egress_deleted(const std::string& egress_id) {
  for (auto& w : workers_) w->delete_egress(egress_id);
  if (dns_) dns_->delete_egress(egress_id);
  std::lock_guard lk(mu_);
  egress_acks_.erase(egress_id);
  timings_.erase(egress_id);
  targets_.erase(egress_id);
  health_.erase(egress_id);
}

std::vector<std::pair<relay::DialTargetPtr, std::shared_ptr<EgressHealth>>> DataplaneRuntime::egresses_in_use() const {
  std::vector<std::pair<relay::DialTargetPtr, std::shared_ptr<EgressHealth>>> out;
  std::lock_guard lk(mu_);
  std::set<std::string> used;
  for (const auto& [id, e] : workspaces_) {
    for (const auto& r : e.policy.egresses()) used.insert(r.egress_id());
    for (const auto& r : e.policy.resolvers())
      if (!r.egress_id().empty()) used.insert(r.egress_id());
  }
  for (const auto& id : used) {
    auto t = targets_.find(id);
    auto h = health_.find(id);
    if (t != targets_.end() && h != health_.end()) out.emplace_back(t->second, h->second);
  }
  return out;
}

std::vector<unsigned> DataplaneRuntime::place_workspace() {
  std::vector<unsigned> order(loop_workspaces_.size());
  for (unsigned i = 0; i < order.size(); ++i) order[i] = i;
  // Least loaded by Workspace count first (lowest index among equals): thousands of
  // Workspaces spread evenly, and one Workspace's loops are distinct.
  std::stable_sort(order.begin(), order.end(),
                   [&](unsigned a, unsigned b) { return loop_workspaces_[a] < loop_workspaces_[b]; });
  order.resize(workspace_loops_);
  std::sort(order.begin(), order.end());
  for (unsigned i : order) ++loop_workspaces_[i];
  return order;
}

void DataplaneRuntime::unplace_workspace(const std::vector<unsigned>& loops) {
  for (unsigned i : loops)
    if (i < loop_workspaces_.size() && loop_workspaces_[i] > 0) --loop_workspaces_[i];
}

Status DataplaneRuntime::workspace_applied(const std::string& workspace_id, const std::string& netns,
                                           const ctrl::NetworkPolicy& policy, uint32_t drain_seconds) {
  auto routes = policy::RouteMatcher::compile(policy);
  if (!routes.ok()) return std::move(routes).error();
  auto plan = std::make_shared<WorkspacePlan>();
  plan->id = workspace_id;
  plan->policy_revision = policy.revision();
  plan->routes = std::move(routes.value());
  bool fresh = false;
  std::vector<unsigned> loops;  // a fresh Workspace's accepting loops
  {
    std::lock_guard lk(mu_);
    auto& e = workspaces_[workspace_id];
    fresh = !e.stats;
    if (fresh) {
      e.stats = std::make_shared<WorkspaceStats>();
      e.acked.assign(workers_.size(), 0);
      e.loops = place_workspace();
      loops = e.loops;
    }
    plan->stats = e.stats;
  }
  WorkspaceListeners listeners;
  if (fresh) {
    auto l = attacher_.attach(workspace_id, netns, policy, static_cast<unsigned>(loops.size()));
    if (!l.ok()) {
      std::lock_guard lk(mu_);
      unplace_workspace(loops);
      workspaces_.erase(workspace_id);
      return std::move(l).error();
    }
    listeners = std::move(l.value());
    std::string named;
    for (unsigned i : loops) named += (named.empty() ? "" : ", ") + std::to_string(i);
    spdlog::info("workspace {}: {} {} with policy revision {} ({} routes, {} resolvers); accepting on loop {}",
                 workspace_id, restoring_.load() ? "re-attached at start to" : "attached to", netns, policy.revision(),
                 policy.egresses_size(), policy.resolvers_size(), named);
  } else {
    auto l = attacher_.update(workspace_id, policy);
    std::lock_guard lk(mu_);
    workspaces_[workspace_id].error = l.ok() ? std::string() : l.error().message;
    if (!l.ok()) return std::move(l).error();
    listeners = std::move(l.value());
    spdlog::info("workspace {}: policy revision {} applied ({} routes, {} resolvers; drain {} s)", workspace_id,
                 policy.revision(), policy.egresses_size(), policy.resolvers_size(), drain_seconds);
  }
  {
    std::lock_guard lk(mu_);
    workspaces_[workspace_id].policy = policy;
  }
  if (dns_) {
    // Listeners come when the policy gains resolvers; a policy without them closes
    // the DNS side, now that the rules no longer point at its listeners.
    dns::DnsListeners dl{std::move(listeners.dns_udp), std::move(listeners.dns_tcp)};
    Status st = dns_->apply_workspace(workspace_id, std::move(listeners.netns), policy, std::move(dl));
    if (!st.ok()) {
      std::lock_guard lk(mu_);
      workspaces_[workspace_id].error = "dns: " + st.error().message;
    }
  }
  // Every loop gets the plan (its acks make applied_revision); those that accept
  // for the Workspace get its listeners too.
  std::vector<std::shared_ptr<UniqueFd>> tcp;  // kept for a take-over (listening_sockets)
  for (unsigned i = 0; i < workers_.size(); ++i) {
    std::shared_ptr<UniqueFd> v4, v6;
    auto j = static_cast<size_t>(std::find(loops.begin(), loops.end(), i) - loops.begin());
    if (j < listeners.v4.size()) tcp.push_back(v4 = std::make_shared<UniqueFd>(std::move(listeners.v4[j])));
    if (j < listeners.v6.size()) tcp.push_back(v6 = std::make_shared<UniqueFd>(std::move(listeners.v6[j])));
    workers_[i]->apply_workspace(plan, v4, v6, drain_seconds);
  }
  if (fresh) {
    std::lock_guard lk(mu_);
    if (auto it = workspaces_.find(workspace_id); it != workspaces_.end()) it->second.tcp_listeners = std::move(tcp);
  }
  return {};
}

void DataplaneRuntime::workspaces_restoring(const std::vector<Restoring>& all) {
  restoring_ = true;
  attacher_.prepare(all, workspace_loops_);
}

void DataplaneRuntime::workspaces_restored() {
  restoring_ = false;
  attacher_.end_prepared();
}

void DataplaneRuntime::forget_workspace(const std::string& workspace_id, bool remove_rules) {
  {
    std::lock_guard lk(mu_);
    auto it = workspaces_.find(workspace_id);
    if (it == workspaces_.end()) return;
    unplace_workspace(it->second.loops);
    workspaces_.erase(it);
  }
  if (remove_rules)
    attacher_.detach(workspace_id);
  else
    attacher_.release(workspace_id);
  spdlog::info("workspace {}: {}; its connections close", workspace_id,
               remove_rules ? "detached (its rules removed)" : "let go (its rules stay, dropping covered traffic)");
  for (auto& w : workers_) w->remove_workspace(workspace_id);
  if (dns_) dns_->remove_workspace(workspace_id);
}

void DataplaneRuntime::workspace_deleted(const std::string& workspace_id) { forget_workspace(workspace_id, true); }

std::vector<std::string> DataplaneRuntime::workspaces_moved() const {
  std::vector<std::string> ids;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, e] : workspaces_) ids.push_back(id);
  }
  std::erase_if(ids, [&](const std::string& id) { return !attacher_.moved(id); });
  return ids;
}

void DataplaneRuntime::workspace_released(const std::string& workspace_id) { forget_workspace(workspace_id, false); }

// Each pass (2 s) costs only the Workspaces the attacher says may need a repair (issue
// 26: polling every namespace was ~14% of a core at 2,000).
void DataplaneRuntime::workspaces_repaired() {
  auto needed = attacher_.repairs_needed();
  if (!needed) {
    std::vector<std::string> ids;
    {
      std::lock_guard lk(mu_);
      for (const auto& [id, e] : workspaces_) ids.push_back(id);
    }
    needed.emplace();
    for (auto& id : ids) {
      WorkspaceAttacher::Repair r = attacher_.repair(id);
      needed->emplace_back(std::move(id), std::move(r));
    }
  }
  for (auto& [id, r] : *needed) {
    std::string failed;
    if (!r.missing.empty() && r.reinstalled.ok()) {
      spdlog::warn("workspace {}: {} (changed behind the agent's back); put back", id, r.missing);
    } else if (!r.missing.empty()) {
      failed = r.missing + "; putting it back failed: " + r.reinstalled.error().message;
    } else {
      failed = std::move(r.unchecked);
    }
    std::lock_guard lk(mu_);
    auto it = workspaces_.find(id);
    if (it == workspaces_.end()) continue;
    // Logged when it starts or changes, not every pass (out of fds, every Workspace's
    // check fails each pass until fds return).
    if (!failed.empty() && failed != it->second.repair_error) spdlog::warn("workspace {}: {} (retrying)", id, failed);
    it->second.repair_error = std::move(failed);
  }
}

Status DataplaneRuntime::leftovers_removed(const std::string& netns, uint64_t dev, uint64_t ino) {
  return attacher_.remove_leftovers(netns, dev, ino);
}

ctrl::NetworkPolicyStatus DataplaneRuntime::workspace_status(const std::string& workspace_id) const {
  ctrl::NetworkPolicyStatus s = tcp_status(workspace_id);
  if (dns_ && s.error() != kNotAttached) {
    if (auto d = dns_->status(workspace_id)) dns::add_dns_status(*d, s);
  }
  return s;
}

ctrl::NetworkPolicyStatus DataplaneRuntime::tcp_status(const std::string& workspace_id) const {
  ctrl::NetworkPolicyStatus s;
  std::lock_guard lk(mu_);
  auto it = workspaces_.find(workspace_id);
  if (it == workspaces_.end()) {
    s.set_error(kNotAttached);
    return s;
  }
  const WorkspaceEntry& e = it->second;
  s.set_applied_revision(min_of(e.acked));
  std::string err = !e.error.empty()          ? e.error
                    : !e.repair_error.empty() ? e.repair_error
                                              : attacher_.health(workspace_id);
  if (!err.empty()) s.set_error(err);
  for (auto& family : attacher_.enforced_families(workspace_id)) s.add_enforced_families(std::move(family));
  std::set<std::string> seen;
  auto add_health = [&](ctrl::EgressStatus& es) {
    auto h = health_.find(es.egress_id());
    if (h == health_.end()) return;
    const EgressHealth::View v = h->second->view();
    auto* out = es.mutable_health();
    out->set_state(v.state);
    if (v.last_success.time_since_epoch().count() != 0)
      *out->mutable_last_success_time() = to_timestamp(v.last_success);
    if (v.last_failure.time_since_epoch().count() != 0) {
      *out->mutable_last_failure_time() = to_timestamp(v.last_failure);
      out->set_last_failure(v.last_failure_reason);
    }
  };
  auto add = [&](const std::string& id, const EgressStats* st) {
    auto* es = s.add_egresses();
    es->set_egress_id(id);
    add_health(*es);
    auto ack = egress_acks_.find(id);
    if (ack != egress_acks_.end()) es->set_applied_revision(min_of(ack->second));
    if (st == nullptr) return;
    es->set_active_connections(non_negative(st->active));
    es->set_draining_connections(non_negative(st->draining));
    const EgressStats::Failure f = st->last_failure();
    if (!f.message.empty()) {
      es->set_last_error(f.message);
      *es->mutable_last_error_time() = to_timestamp(f.at);
      es->set_consecutive_failures(f.consecutive);
    }
    add_counters(*st, *es->mutable_connections());
  };
  // Every Egress's, listed or not.
  e.stats->for_each([&](const std::string&, const EgressStats& st) { add_counters(st, *s.mutable_connections()); });
  for (const auto& r : e.policy.egresses())
    if (seen.insert(r.egress_id()).second) add(r.egress_id(), e.stats->find(r.egress_id()).get());
  // An Egress the policy dropped is listed while connections still drain through it.
  e.stats->for_each([&](const std::string& id, const EgressStats& st) {
    if (!seen.count(id) && non_negative(st.active) + non_negative(st.draining) > 0) add(id, &st);
  });
  return s;
}

void DataplaneRuntime::stop_accepting() {
  for (auto& w : workers_) w->stop_accepting();
  if (dns_) dns_->stop_accepting();
  // The next agent accepts on these same sockets (it took them with "released"), or
  // on new ones in their SO_REUSEPORT groups: then the loops' close, the last
  // reference here, moves what is queued over (tcp_migrate_req).
  std::lock_guard lk(mu_);
  for (auto& [id, e] : workspaces_) e.tcp_listeners.clear();
}

std::vector<int> DataplaneRuntime::listening_sockets() const {
  std::lock_guard lk(mu_);
  std::vector<int> fds;
  for (const auto& [id, e] : workspaces_)
    for (const auto& l : e.tcp_listeners) fds.push_back(l->get());
  return fds;
}

void DataplaneRuntime::move_connections(const MovedSink& sink, std::chrono::milliseconds timeout) {
  struct Left {
    std::mutex mu;
    std::condition_variable cv;
    size_t workers = 0;
  };
  auto left = std::make_shared<Left>();
  left->workers = workers_.size();
  for (auto& w : workers_) {
    w->move_connections(
        [sink](const std::string& id, relay::MovedRelay m) {
      sink({id, std::move(m)});
        },
        [left] {
      std::lock_guard lk(left->mu);
      if (--left->workers == 0) left->cv.notify_all();
    });
  }
  std::unique_lock lk(left->mu);
  if (!left->cv.wait_for(lk, timeout, [&] { return left->workers == 0; }))
    spdlog::warn("take-over: {} data-plane loops still moving connections after {} ms", left->workers, timeout.count());
}

void DataplaneRuntime::adopt_connection(MovedConnection moved) {
  std::vector<unsigned> loops;
  {
    std::lock_guard lk(mu_);
    if (auto it = workspaces_.find(moved.workspace_id); it != workspaces_.end()) loops = it->second.loops;
  }
  // Any loop knows every Workspace; one of its accepting loops keeps its load together.
  const unsigned n = next_adopting_.fetch_add(1, std::memory_order_relaxed);
  const unsigned i = loops.empty() ? n % static_cast<unsigned>(workers_.size()) : loops[n % loops.size()];
  workers_[i]->adopt(std::move(moved.workspace_id), std::make_shared<relay::MovedRelay>(std::move(moved.relay)));
}

RuntimeCounts DataplaneRuntime::counts() const {
  RuntimeCounts c;
  c.inherited_connections = inherited_connections_.load(std::memory_order_relaxed);
  if (access_log_) {
    c.access_log_lines = access_log_->written();
    c.access_log_dropped = access_log_->dropped();
  }
  std::lock_guard lk(mu_);
  c.active_connections = non_negative(total_connections_);
  uint64_t draining = 0;
  for (const auto& [id, e] : workspaces_)
    e.stats->for_each([&](const std::string&, const EgressStats& st) { draining += non_negative(st.draining); });
  c.draining_connections = draining;
  c.active_connections -= std::min(c.active_connections, draining);
  return c;
}

namespace {

DnsMetrics dns_metrics(const dns::WorkspaceDnsStatus& s) {
  DnsMetrics m{s.counters.queries, s.counters.answers,     s.counters.timeouts,    s.counters.failovers, {},
               s.in_flight,        s.counters.query_bytes, s.counters.answer_bytes};
  for (size_t i = 0; i < dns::kFailureReasonCount; ++i)
    m.failures.emplace_back(dns::failure_reason_name(static_cast<dns::FailureReason>(i)), s.counters.failures[i]);
  return m;
}

}  // namespace

std::vector<WorkspaceMetrics> DataplaneRuntime::metrics() const {
  std::vector<WorkspaceMetrics> out;
  // Before the lock: the DNS loop answers on its own thread.
  auto dns = dns_ ? dns_->statuses() : std::map<std::string, dns::WorkspaceDnsStatus>{};
  std::lock_guard lk(mu_);
  for (const auto& [id, e] : workspaces_) {
    WorkspaceMetrics& m = out.emplace_back();
    m.workspace_id = id;
    m.refused_over_limit = e.stats->refused_over_limit.load();
    m.refused_uncovered = e.stats->refused_uncovered.load();
    e.stats->for_each([&](const std::string& egress_id, const EgressStats& st) {
      // A deleted Egress's series go with it (unless connections still count there).
      if (!egress_acks_.count(egress_id) && non_negative(st.active) + non_negative(st.draining) == 0) return;
      m.egresses.push_back(EgressMetrics{egress_id, non_negative(st.active), non_negative(st.draining),
                                         st.dial_failures.load(), st.dial_refusals.load(), st.opened.load(),
                                         closed_counts(st), dial_cause_counts(st), st.traffic.from_guest.load(),
                                         st.traffic.to_guest.load()});
    });
    if (auto d = dns.find(id); d != dns.end() && !d->second.resolvers.empty()) m.dns = dns_metrics(d->second);
  }
  return out;
}

std::vector<EgressTimingMetrics> DataplaneRuntime::egress_timings() const {
  std::vector<EgressTimingMetrics> out;
  std::lock_guard lk(mu_);
  for (const auto& [id, t] : timings_) {
    EgressTimingMetrics& m = out.emplace_back();
    m.egress_id = id;
    if (auto h = health_.find(id); h != health_.end()) {
      const EgressHealth::View v = h->second->view();
      m.probed = v.state != "unknown";
      m.up = v.state == "healthy";
      m.probe_failures = v.probe_failures;
    }
    m.stages = {{"resolve", "", t->resolve.snapshot()},
                {"connect", "", t->connect.snapshot()},
                {"tls_handshake", "full", t->tls_full.snapshot()},
                {"tls_handshake", "resumed", t->tls_resumed.snapshot()},
                {"socks5", "", t->socks5.snapshot()},
                {"dial", "", t->dial.snapshot()},
                {"first_byte", "", t->first_byte.snapshot()}};
  }
  return out;
}

Result<ConnectionPage> DataplaneRuntime::connections(const std::string& workspace_id, uint64_t after_id,
                                                     size_t limit) const {
  // Each loop walks its own lists on its own thread: no lock on the data plane.
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    size_t left;
    std::vector<ctrl::Connection> all;
  };
  auto p = std::make_shared<Pending>();
  p->left = workers_.size();
  for (const auto& w : workers_)
    w->list_connections(workspace_id, after_id, limit + 1, [p](std::vector<ctrl::Connection> part) {
      std::lock_guard lk(p->mu);
      for (auto& c : part) p->all.push_back(std::move(c));
      if (--p->left == 0) p->cv.notify_one();
    });
  std::unique_lock lk(p->mu);
  if (!p->cv.wait_for(lk, std::chrono::seconds(5), [&] { return p->left == 0; }))
    return Error{Code::unavailable, "a data plane loop did not answer within 5 s"};
  ConnectionPage page;
  page.connections = std::move(p->all);
  std::sort(page.connections.begin(), page.connections.end(),
            [](const auto& a, const auto& b) { return a.connection_id() < b.connection_id(); });
  page.more = page.connections.size() > limit;
  if (page.more) page.connections.resize(limit);
  return page;
}

void DataplaneRuntime::ack_egress(unsigned worker, const std::string& egress_id, uint64_t revision) {
  std::lock_guard lk(mu_);
  auto it = egress_acks_.find(egress_id);
  if (it != egress_acks_.end() && worker < it->second.size())
    it->second[worker] = std::max(it->second[worker], revision);
}

void DataplaneRuntime::ack_policy(unsigned worker, const std::string& workspace_id, uint64_t revision) {
  std::lock_guard lk(mu_);
  auto it = workspaces_.find(workspace_id);
  if (it != workspaces_.end() && worker < it->second.acked.size())
    it->second.acked[worker] = std::max(it->second.acked[worker], revision);
}

}  // namespace kib::dataplane
