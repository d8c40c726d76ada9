#include "agent/dataplane/worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>

#include <spdlog/spdlog.h>

namespace kib::dataplane {

namespace {

// The guest's address and port of an accepted socket; nullopt once it has none.
std::optional<relay::SocketAddress> guest_address(int guest_fd) {
  relay::SocketAddress peer{};
  socklen_t len = sizeof peer;
  if (getpeername(guest_fd, &peer.sa, &len) != 0) return std::nullopt;
  return peer;
}

// Refuses an accepted guest connection with an RST.
void reset_and_close(UniqueFd fd) {
  uring::SocketHandle h(std::move(fd));
  h.reset_on_close();
}

constexpr uint64_t kAcceptPauseMs = 200;

// "EMFILE/ENFILE survived (pause accepting, log once, resume)": one warning per
// process, not one per listener and pause, so a saturated host does not flood the log.
void log_accept_pause_once(int err) {
  static std::atomic<bool> logged{false};
  if (logged.exchange(true)) return;
  spdlog::warn(
      "data plane out of {} ({}): accepting paused for {} ms at a time until resources return; "
      "raise LimitNOFILE or lower dataplane.max_connections",
      err == EMFILE || err == ENFILE ? "file descriptors" : "memory", std::strerror(err), kAcceptPauseMs);
}

// Whether one more relayed connection fits: its guest and upstream sockets (two fds
// when the upstream one is not a direct descriptor). A socket (not a dup) also finds
// a full system file table (ENFILE).
bool room_for_a_connection() {
  UniqueFd a(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  UniqueFd b(a ? ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1);
  return b.valid();
}

}  // namespace

// Multishot accept on one transparent listener. Paused (timer) when the process or
// the system is out of fds, then re-armed. The listening socket is shared by every
// loop's Listener of the workspace.
class Listener final : private uring::OpOwner, private uring::TimerHandler {
 public:
  Listener(Worker& w, Worker::LoopWorkspace& ws, uring::Loop& loop, std::shared_ptr<UniqueFd> fd)
      : uring::OpOwner(loop), worker_(w), ws_(ws), fd_(std::move(fd)), timer_(this) {}
  void arm() {
    if (closing() || in_flight(kAccept)) return;
    io_uring_sqe* s = start_op(kAccept);
    io_uring_prep_multishot_accept(s, fd_->get(), nullptr, nullptr, SOCK_CLOEXEC);
  }
  void close() {
    timer_.cancel();
    close_ops();  // may release: nothing after it
  }
  bool released() const { return released_; }
  // Out of descriptors or memory (accept's own error, or a dial's socket()): stop
  // accepting; queued guests wait in the backlog instead of being accepted and reset.
  void pause(int err) {
    log_accept_pause_once(err);
    if (closing() || paused_) return;
    paused_ = true;
    loop_.timers().arm(timer_, loop_.now_ms() + kAcceptPauseMs);
    cancel_op(kAccept);
  }

 private:
  enum Tag : unsigned { kAccept = 0 };
  void on_complete(unsigned, int32_t res, uint32_t) override {
    if (res >= 0) {
      UniqueFd conn(res);
      if (!closing()) worker_.on_accept(ws_, std::move(conn));
    } else if (!closing() && (res == -EMFILE || res == -ENFILE || res == -ENOMEM || res == -ENOBUFS)) {
      return pause(-res);
    }
    if (!in_flight(kAccept) && !paused_) arm();
  }
  // The workspace (which owns this) may be freed here: nothing after it.
  void on_released() override {
    released_ = true;
    // Our share of the listening socket: the last one closes it, so that its queued
    // connections move to a live sibling (take-over) instead of waiting there.
    fd_.reset();
    worker_.maybe_free(&ws_);
  }
  void on_timer(uring::Timer&) override {
    // "resume" once resources returned; until then stay paused.
    if (!room_for_a_connection()) return loop_.timers().arm(timer_, loop_.now_ms() + kAcceptPauseMs);
    paused_ = false;
    arm();
  }

  Worker& worker_;
  Worker::LoopWorkspace& ws_;
  std::shared_ptr<UniqueFd> fd_;
  uring::Timer timer_;
  bool paused_ = false;
  bool released_ = false;
};

struct Worker::LoopWorkspace {
  WorkspacePlanPtr plan;
  std::vector<std::unique_ptr<Listener>> listeners;
  uring::IntrusiveList<relay::RelayConnection, relay::OwnerListTag> connections_list;
  size_t connections = 0;
  bool retired = false;
  std::unordered_map<std::string, std::shared_ptr<EgressStats>> stats;
};

Worker::Worker(unsigned index, WorkerHost& host, const WorkerOptions& options)
    : index_(index), host_(host), opts_(options) {}

Worker::~Worker() { stop(); }

Status Worker::start() {
  std::promise<Status> ready;
  auto fut = ready.get_future();
  thread_ = std::thread([this, &ready] {
    auto l = uring::Loop::create(opts_.loop);
    if (!l.ok()) {
      ready.set_value(std::move(l).error());
      return;
    }
    loop_ = std::move(l.value());
    if (loop_->slots().capacity() < opts_.loop.file_slots)
      spdlog::warn(
          "data plane loop {}: the kernel refused its {} direct-descriptor slots; its upstream "
          "sockets use plain fds",
          index_, opts_.loop.file_slots);
    auto r = LoopResolver::create(*loop_, opts_.resolver);
    if (!r.ok()) {
      loop_.reset();
      ready.set_value(std::move(r).error());
      return;
    }
    resolver_ = std::move(r.value());
    resolver_polls_ = resolver_->polls_in_flight();
    ready.set_value(Status{});
    thread_main();
  });
  Status st = fut.get();
  if (!st.ok()) {
    thread_.join();
  }
  return st;
}

void Worker::thread_main() {
  loop_->run([this] {
    if (!workspaces_.empty() || !retired_.empty()) return false;
    resolver_.reset();  // orphans its polls; wait for their CQEs
    return *resolver_polls_ == 0;
  });
  egresses_.clear();
}

void Worker::stop() {
  if (!thread_.joinable()) return;
  loop_->post([this] {
    std::vector<std::string> ids;
    for (auto& [id, ws] : workspaces_) ids.push_back(id);
    for (auto& id : ids) remove_workspace(id);
  });
  loop_->request_stop();
  thread_.join();
  loop_.reset();
}

void Worker::publish_egress(relay::DialTargetPtr target, uint32_t drain_seconds) {
  loop_->post([this, target = std::move(target), drain_seconds] {
    const std::string& id = target->egress_id();
    const uint64_t rev = target->revision_number();
    egresses_[id] = target;
    // "connections through older revisions get a deadline now + drain_seconds"
    for (auto& [wid, ws] : workspaces_) {
      ws->connections_list.for_each([&](relay::RelayConnection& c) {
        if (c.target().egress_id() == id && c.target().revision_number() < rev) drain(c, drain_seconds);
      });
    }
    host_.ack_egress(index_, id, rev);
  });
}

void Worker::delete_egress(const std::string& egress_id) {
  loop_->post([this, egress_id] {
    egresses_.erase(egress_id);
    // "Connections still draining through the Egress are closed at once."
    for (auto& [wid, ws] : workspaces_) {
      ws->connections_list.for_each([&](relay::RelayConnection& c) {
        if (c.target().egress_id() == egress_id) c.abort();
      });
    }
  });
}

void Worker::apply_workspace(WorkspacePlanPtr plan, std::shared_ptr<UniqueFd> v4, std::shared_ptr<UniqueFd> v6,
                             uint32_t drain_seconds) {
  loop_->post([this, plan = std::move(plan), v4 = std::move(v4), v6 = std::move(v6), drain_seconds] {
    auto& slot = workspaces_[plan->id];
    if (!slot) {
      slot = std::make_unique<LoopWorkspace>();
      slot->plan = plan;
      for (auto* fd : {&v4, &v6}) {
        if (!*fd || !(*fd)->valid()) continue;
        slot->listeners.push_back(std::make_unique<Listener>(*this, *slot, *loop_, *fd));
        slot->listeners.back()->arm();
      }
    } else {
      slot->plan = plan;
      // "connections the new policy no longer routes through the same Egress drain"
      slot->connections_list.for_each([&](relay::RelayConnection& c) {
        const auto d = c.original_dst();
        auto ip = policy::IpAddress::from_sockaddr(&d.sa);
        uint16_t port = ntohs(d.sa.sa_family == AF_INET6 ? d.v6.sin6_port : d.v4.sin_port);
        auto idx = plan->routes.match(ip, port);
        if (!idx || plan->routes.routes()[*idx].egress_id != c.target().egress_id()) drain(c, drain_seconds);
      });
    }
    host_.ack_policy(index_, plan->id, plan->policy_revision);
  });
}

void Worker::remove_workspace(const std::string& workspace_id) {
  auto run = [this, workspace_id] {
    auto it = workspaces_.find(workspace_id);
    if (it == workspaces_.end()) return;
    std::unique_ptr<LoopWorkspace> ws = std::move(it->second);
    workspaces_.erase(it);
    retire(std::move(ws));
  };
  loop_->post(run);
}

void Worker::stop_accepting() {
  loop_->post([this] {
    for (auto& [id, ws] : workspaces_)
      for (auto& l : ws->listeners) l->close();
  });
}

void Worker::move_connections(MovedSink sink, std::function<void()> done) {
  loop_->post([this, sink = std::move(sink), done = std::move(done)]() mutable {
    move_sink_ = std::move(sink);
    move_done_ = std::move(done);
    std::vector<relay::RelayConnection*> movable;
    for (auto& [id, ws] : workspaces_)
      ws->connections_list.for_each([&](relay::RelayConnection& c) {
        if (c.movable()) movable.push_back(&c);
      });
    // Counted in full first: a move may end at once, and the last one calls done.
    moving_ = movable.size() + 1;
    for (auto* c : movable) c->move_out();
    on_moved_count_down();
  });
}

void Worker::on_moved_count_down() {
  if (--moving_ != 0 || !move_done_) return;
  auto done = std::move(move_done_);
  move_sink_ = nullptr;
  done();
}

void Worker::on_moved(relay::RelayConnection& c, relay::MovedRelay moved) {
  if (moved.guest && move_sink_) move_sink_(static_cast<LoopWorkspace*>(c.owner_context)->plan->id, std::move(moved));
  on_moved_count_down();
}

void Worker::adopt(std::string workspace_id, std::shared_ptr<relay::MovedRelay> moved) {
  loop_->post([this, id = std::move(workspace_id), moved] { adopt_on_loop(id, std::move(*moved)); });
}

void Worker::list_connections(std::string workspace_id, uint64_t after_id, size_t limit, ConnectionsFn done) {
  loop_->post([this, id = std::move(workspace_id), after_id, limit, done = std::move(done)] {
    std::vector<std::pair<const LoopWorkspace*, const relay::RelayConnection*>> picked;
    auto take = [&](LoopWorkspace& ws) {
      size_t n = 0;
      // Connections are appended as they get their IDs, so the list is in ID order.
      ws.connections_list.for_each_while([&](relay::RelayConnection& c) {
        if (c.id <= after_id || !(c.dialing() || c.established())) return true;  // not closing or moving out
        picked.emplace_back(&ws, &c);
        return ++n < limit;
      });
    };
    if (id.empty()) {
      for (const auto& [wid, ws] : workspaces_) take(*ws);
    } else if (auto it = workspaces_.find(id); it != workspaces_.end()) {
      take(*it->second);
    }
    auto by_id = [](const auto& a, const auto& b) { return a.second->id < b.second->id; };
    if (picked.size() > limit) {
      std::nth_element(picked.begin(), picked.begin() + static_cast<ptrdiff_t>(limit), picked.end(), by_id);
      picked.resize(limit);
    }
    std::sort(picked.begin(), picked.end(), by_id);
    std::vector<::kibotos::ctrl::v1::Connection> out;
    out.reserve(picked.size());
    for (const auto& [ws, c] : picked) out.push_back(describe(*ws, *c));
    done(std::move(out));
  });
}

::kibotos::ctrl::v1::Connection Worker::describe(const LoopWorkspace& ws, const relay::RelayConnection& c) const {
  namespace v1 = ::kibotos::ctrl::v1;
  v1::Connection v;
  v.set_connection_id(c.id);
  v.set_workspace_id(ws.plan->id);
  if (c.guest_peer) {
    v.set_guest_address(relay::to_string(*c.guest_peer));
  } else if (const auto peer = guest_address(c.guest_fd())) {
    v.set_guest_address(relay::to_string(*peer));
  }
  if (const auto dst = c.original_dst(); dst.sa.sa_family != AF_UNSPEC)
    v.set_original_destination(relay::to_string(dst));
  v.set_egress_id(c.target().egress_id());
  v.set_egress_revision(c.target().revision_number());
  v.set_state(c.draining()  ? v1::CONNECTION_STATE_DRAINING
              : c.dialing() ? v1::CONNECTION_STATE_DIALING
                            : v1::CONNECTION_STATE_RELAYING);
  const uint64_t now = loop_->now_ms();
  v.set_age_ms(now > c.opened_ms() ? now - c.opened_ms() : 0);
  v.set_bytes_from_guest(c.bytes_from_guest());
  v.set_bytes_to_guest(c.bytes_to_guest());
  return v;
}

void Worker::adopt_on_loop(const std::string& workspace_id, relay::MovedRelay moved) {
  auto it = workspaces_.find(workspace_id);
  auto eit = egresses_.find(moved.egress_id);
  if (it == workspaces_.end() || eit == egresses_.end()) {
    spdlog::warn("a connection handed over for Workspace {} through Egress {} has no place here: reset", workspace_id,
                 moved.egress_id);
    return moved.reset();
  }
  // Counted as accepted, past the connection caps: refusing it would reset a live one.
  if (opts_.inherited_connections) opts_.inherited_connections->fetch_add(1, std::memory_order_relaxed);
  UniqueFd guest = std::move(moved.guest);
  const bool draining = moved.drain_left_ms != 0;
  add_connection(*it->second, std::move(guest), eit->second, draining)->resume(std::move(moved));
}

relay::RelayConnection* Worker::add_connection(LoopWorkspace& ws, UniqueFd guest, const relay::DialTargetPtr& target,
                                               bool draining) {
  EgressStats& es = stats_for(ws, target->egress_id());
  auto* c = new relay::RelayConnection(*loop_, *this, opts_.timeouts, std::move(guest), target);
  c->owner_context = &ws;
  if (opts_.next_connection_id) c->id = opts_.next_connection_id->fetch_add(1, std::memory_order_relaxed);
  ws.connections_list.push_back(*c);  // IDs grow along the list: list_connections relies on it
  ++ws.connections;
  c->set_traffic(&es.traffic);
  if (opts_.access_log != nullptr) {  // the guest's address, for its access log line
    if (const auto peer = guest_address(c->guest_fd())) c->guest_peer = std::make_unique<relay::SocketAddress>(*peer);
  }
  ws.plan->stats->connections.fetch_add(1, std::memory_order_relaxed);
  opts_.total_connections->fetch_add(1, std::memory_order_relaxed);
  es.opened.fetch_add(1, std::memory_order_relaxed);
  (draining ? es.draining : es.active).fetch_add(1, std::memory_order_relaxed);
  return c;
}

// Marked retired only once every listener and connection was told to close: a
// release that comes at once (nothing in flight) must not free the workspace while
// this still walks its listeners and connections.
void Worker::retire(std::unique_ptr<LoopWorkspace> ws) {
  LoopWorkspace* raw = ws.get();
  retired_.push_back(std::move(ws));
  for (auto& l : raw->listeners) l->close();
  raw->connections_list.for_each([](relay::RelayConnection& c) { c.abort(); });
  raw->retired = true;
  maybe_free(raw);
}

void Worker::maybe_free(LoopWorkspace* ws) {
  if (!ws->retired || ws->connections != 0) return;
  for (auto& l : ws->listeners)
    if (!l->released()) return;
  auto it = std::find_if(retired_.begin(), retired_.end(), [ws](auto& p) { return p.get() == ws; });
  if (it != retired_.end()) retired_.erase(it);
}

EgressStats& Worker::stats_for(LoopWorkspace& ws, const std::string& egress_id) {
  auto& p = ws.stats[egress_id];
  if (!p) p = ws.plan->stats->egress(egress_id);
  return *p;
}

void Worker::on_accept(LoopWorkspace& ws, UniqueFd fd) {
  relay::SocketAddress dst{};
  socklen_t len = sizeof dst;
  // TPROXY keeps the original destination as the accepted socket's local address.
  if (getsockname(fd.get(), &dst.sa, &len) != 0) return reset_and_close(std::move(fd));
  WorkspaceStats& wstats = *ws.plan->stats;
  if (opts_.total_connections->load(std::memory_order_relaxed) >= opts_.max_connections ||
      wstats.connections.load(std::memory_order_relaxed) >= opts_.max_connections_per_workspace) {
    wstats.refused_over_limit.fetch_add(1, std::memory_order_relaxed);
    return reset_and_close(std::move(fd));
  }
  auto ip = policy::IpAddress::from_sockaddr(&dst.sa);
  uint16_t port = ntohs(dst.sa.sa_family == AF_INET6 ? dst.v6.sin6_port : dst.v4.sin_port);
  auto idx = ws.plan->routes.match(ip, port);
  if (!idx) {
    wstats.refused_uncovered.fetch_add(1, std::memory_order_relaxed);
    return reset_and_close(std::move(fd));
  }
  const std::string& egress_id = ws.plan->routes.routes()[*idx].egress_id;
  auto eit = egresses_.find(egress_id);
  EgressStats& es = stats_for(ws, egress_id);
  if (eit == egresses_.end()) {
    // Counted as a connection whose dial failed at once.
    es.opened.fetch_add(1, std::memory_order_relaxed);
    es.closed[static_cast<size_t>(relay::CloseReason::dial_failed)].fetch_add(1, std::memory_order_relaxed);
    es.dial_failures.fetch_add(1, std::memory_order_relaxed);
    es.dial_failed_by[static_cast<size_t>(relay::DialCause::local)].fetch_add(1, std::memory_order_relaxed);
    static constexpr std::string_view kUnpublished = "the Egress is not published to the data plane";
    record_failure(ws, egress_id, es, static_cast<size_t>(relay::DialCause::local),
                   "dial failed: " + std::string(kUnpublished));
    if (opts_.access_log != nullptr) log_unpublished(ws, egress_id, fd.get(), dst, kUnpublished);
    return reset_and_close(std::move(fd));
  }
  add_connection(ws, std::move(fd), eit->second, false)->start(dst);
}

void Worker::drain(relay::RelayConnection& c, uint32_t drain_seconds) {
  if (c.closing() || c.draining()) return;
  auto& ws = *static_cast<LoopWorkspace*>(c.owner_context);
  EgressStats& es = stats_for(ws, c.target().egress_id());
  // 0: closed when the new revision takes over.
  c.drain_until(loop_->now_ms() + uint64_t{drain_seconds} * 1000);
  if (c.draining() && !c.closing()) {
    es.active.fetch_sub(1, std::memory_order_relaxed);
    es.draining.fetch_add(1, std::memory_order_relaxed);
  }
}

void Worker::resolve(relay::RelayConnection& c, const std::string& host) {
  relay::RelayConnection* conn = &c;  // alive until on_resolved: the lookup counts as in flight
  if (!resolver_) return conn->on_resolved(Error{Code::unavailable, "resolver stopped"});
  // Limits on what guests control: lookups pending on this loop.
  if (resolver_->pending() >= opts_.max_pending_lookups)
    return conn->on_resolved(Error{Code::resource_exhausted, "too many endpoint lookups pending"});
  resolver_->resolve(host, [conn](Result<std::vector<policy::IpAddress>> r) { conn->on_resolved(std::move(r)); });
}

void Worker::on_established(relay::RelayConnection& c) {
  auto& ws = *static_cast<LoopWorkspace*>(c.owner_context);
  stats_for(ws, c.target().egress_id()).record_success();
}

void Worker::on_dial_failed(relay::RelayConnection& c, relay::DialCause cause, const std::string& reason) {
  auto& ws = *static_cast<LoopWorkspace*>(c.owner_context);
  const std::string& egress_id = c.target().egress_id();
  EgressStats& es = stats_for(ws, egress_id);
  es.dial_failures.fetch_add(1, std::memory_order_relaxed);
  if (cause == relay::DialCause::refused) es.dial_refusals.fetch_add(1, std::memory_order_relaxed);
  es.dial_failed_by[static_cast<size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  record_failure(ws, egress_id, es, static_cast<size_t>(cause), "dial failed: " + reason);
  if (opts_.access_log != nullptr) {
    failed_dial_ = &c;
    failed_cause_ = cause;
    failed_reason_ = reason;
  }
}

void Worker::record_failure(LoopWorkspace& ws, const std::string& egress_id, EgressStats& es, size_t budget,
                            const std::string& what) {
  es.record_failure(what);
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  uint64_t held_back = 0;
  if (!es.log_budget[budget].admit(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), &held_back))
    return;
  if (held_back == 0)
    spdlog::info("workspace {}: egress {}: {}", ws.plan->id, egress_id, what);
  else
    spdlog::info("workspace {}: egress {}: {} (and {} more like it not logged)", ws.plan->id, egress_id, what,
                 held_back);
}

void Worker::on_out_of_resources(int err) {
  for (auto& [id, ws] : workspaces_)
    for (auto& l : ws->listeners) l->pause(err);
}

void Worker::on_closed(relay::RelayConnection& c) {
  auto& ws = *static_cast<LoopWorkspace*>(c.owner_context);
  EgressStats& es = stats_for(ws, c.target().egress_id());
  if (c.draining())
    es.draining.fetch_sub(1, std::memory_order_relaxed);
  else
    es.active.fetch_sub(1, std::memory_order_relaxed);
  const relay::CloseReason why = c.close_reason();
  es.closed[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
  if (why == relay::CloseReason::upstream_reset)
    record_failure(ws, c.target().egress_id(), es, relay::kDialCauseCount,
                   "an established connection was reset by the Egress or its TLS stream broke");
  ws.plan->stats->connections.fetch_sub(1, std::memory_order_relaxed);
  opts_.total_connections->fetch_sub(1, std::memory_order_relaxed);
  if (opts_.access_log != nullptr) log_access(ws, c);
}

void Worker::log_access(const LoopWorkspace& ws, const relay::RelayConnection& c) {
  const bool failed = failed_dial_ == &c;
  failed_dial_ = nullptr;
  AccessRecord r;
  r.closed_at = std::chrono::system_clock::now();
  r.workspace_id = ws.plan->id;
  r.egress_id = c.target().egress_id();
  r.egress_revision = c.target().revision_number();
  if (c.guest_peer) r.guest = relay::to_string(*c.guest_peer);
  r.destination = relay::to_string(c.original_dst());
  const uint64_t now = loop_->now_ms();
  r.duration_ms = now > c.opened_ms() ? now - c.opened_ms() : 0;
  r.bytes_from_guest = c.bytes_from_guest();
  r.bytes_to_guest = c.bytes_to_guest();
  r.reason = c.close_reason();
  if (failed) {
    r.dial_cause = relay::dial_cause_name(failed_cause_);
    r.error = failed_reason_;
  }
  opts_.access_log->write(access_log_line(r));
}

// Counted as a connection whose dial failed, so it gets its line too.
void Worker::log_unpublished(const LoopWorkspace& ws, const std::string& egress_id, int guest_fd,
                             const relay::SocketAddress& dst, std::string_view error) {
  AccessRecord r;
  r.closed_at = std::chrono::system_clock::now();
  r.workspace_id = ws.plan->id;
  r.egress_id = egress_id;
  if (const auto peer = guest_address(guest_fd)) r.guest = relay::to_string(*peer);
  r.destination = relay::to_string(dst);
  r.reason = relay::CloseReason::dial_failed;
  r.dial_cause = relay::dial_cause_name(relay::DialCause::local);
  r.error = error;
  opts_.access_log->write(access_log_line(r));
}

void Worker::on_released(relay::RelayConnection& c) {
  auto* ws = static_cast<LoopWorkspace*>(c.owner_context);
  c.uring::ListNode<relay::OwnerListTag>::unlink();
  --ws->connections;
  delete &c;
  maybe_free(ws);
}

}  // namespace kib::dataplane
