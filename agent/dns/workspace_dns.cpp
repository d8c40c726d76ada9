#include "agent/dns/workspace_dns.h"

#include <sys/socket.h>

#include <algorithm>

#include "agent/policy/endpoint.h"

namespace kib::dns {
namespace {

constexpr uint64_t kSweepMs = 1000;

void add_counters(DnsCounters& into, const DnsCounters& c) {
  into.queries += c.queries;
  into.answers += c.answers;
  into.timeouts += c.timeouts;
  into.failovers += c.failovers;
  into.query_bytes += c.query_bytes;
  into.answer_bytes += c.answer_bytes;
  for (size_t i = 0; i < kFailureReasonCount; ++i) into.failures[i] += c.failures[i];
}

}  // namespace

Result<std::vector<ResolverRoute>> resolver_routes(const ::kibotos::ctrl::v1::NetworkPolicy& policy) {
  std::vector<ResolverRoute> out;
  for (int i = 0; i < policy.resolvers_size(); ++i) {
    const auto& r = policy.resolvers(i);
    ResolverRoute route;
    route.tcp = r.has_tcp();
    route.egress_id = r.egress_id();
    auto hp = policy::parse_ip_port(route.tcp ? r.tcp().address() : r.udp().address());
    if (!hp.ok() || !hp->ip)
      return make_error(Code::invalid_argument, "resolvers[" + std::to_string(i) + "]: address is not ip:port");
    route.address = SocketAddress::from(*hp->ip, hp->port);
    out.push_back(std::move(route));
  }
  return out;
}

std::string resolver_label(const ResolverState& r) {
  return std::string(r.tcp ? "tcp " : "udp ") + r.address + (r.egress_id.empty() ? "" : " via " + r.egress_id);
}

WorkspaceDns::WorkspaceDns(const StreamContext& ctx, EgressLookup egresses, ReplyOpener opener,
                           const WorkspaceDnsOptions& options, uint64_t policy_revision,
                           std::vector<ResolverRoute> resolvers)
    : ctx_(ctx),
      egresses_(std::move(egresses)),
      options_(options),
      policy_revision_(policy_revision),
      replies_(options.reply_sockets, std::move(opener)),
      timer_(this) {
  reset_resolvers(std::move(resolvers));
}

WorkspaceDns::~WorkspaceDns() {
  // Guest sockets and channels close themselves down (their deleters call close()).
  timer_.cancel();
}

void WorkspaceDns::reset_resolvers(std::vector<ResolverRoute> resolvers) {
  if (mux_) add_counters(retired_counters_, mux_->counters());
  slots_.clear();
  // Their queries in flight are forgotten with the old mux: the guests reconnect.
  tcp_origins_.clear();
  tcp_connections_.clear();
  resolvers_ = std::move(resolvers);
  last_errors_.assign(resolvers_.size(), {});
  QueryMuxOptions mo;
  mo.resolver_count = resolvers_.size();
  mo.attempt_timeout = options_.attempt_timeout;
  mo.max_in_flight = options_.max_in_flight;
  mux_ = std::make_unique<QueryMux>(mo);
}

void WorkspaceDns::set_resolvers(uint64_t policy_revision, std::vector<ResolverRoute> resolvers) {
  policy_revision_ = policy_revision;
  if (resolvers == resolvers_) return;
  reset_resolvers(std::move(resolvers));
}

void WorkspaceDns::add_udp_listener(UniqueFd fd) {
  udp_listeners_.push_back(GuestUdpListener::start(ctx_.loop, *this, std::move(fd), ctx_.live_objects));
}

void WorkspaceDns::close_listeners() {
  udp_listeners_.clear();
  tcp_listeners_.clear();
}

void WorkspaceDns::add_tcp_listener(UniqueFd fd) {
  tcp_listeners_.push_back(GuestTcpListener::start(ctx_.loop, *this, std::move(fd), ctx_.live_objects));
}

// ---- guest side ----

void WorkspaceDns::on_guest_udp_query(const SocketAddress& guest, const SocketAddress& asked, ByteView query) {
  submit(GuestOrigin{guest, asked, 0}, query);
}

void WorkspaceDns::on_guest_tcp_accept(UniqueFd fd, const SocketAddress& guest, const SocketAddress& asked) {
  if (tcp_connections_.size() >= options_.max_guest_tcp_connections) return;  // fd closes: limit
  const uint64_t id = next_connection_++;
  tcp_origins_[id] = GuestOrigin{guest, asked, id};
  tcp_connections_.emplace(id, GuestTcpConnection::start(ctx_.loop, *this, std::move(fd), id, ctx_.live_objects));
  rearm();
}

void WorkspaceDns::on_guest_tcp_query(uint64_t connection, ByteView query) {
  auto it = tcp_origins_.find(connection);
  if (it == tcp_origins_.end()) return;
  submit(it->second, query);
}

void WorkspaceDns::on_guest_tcp_closed(uint64_t connection) {
  mux_->forget_connection(connection);
  tcp_origins_.erase(connection);
  tcp_connections_.erase(connection);
}

void WorkspaceDns::submit(const GuestOrigin& origin, ByteView query) {
  auto d = mux_->submit(origin, query, now());
  if (!d.ok()) return;  // counted; the guest retries as after a lost datagram
  if (!origin.is_udp()) {
    if (auto it = tcp_connections_.find(origin.tcp_connection); it != tcp_connections_.end())
      it->second->query_started();
  }
  dispatch(*d);
  rearm();
}

// ---- upstream side ----

WorkspaceDns::Slot* WorkspaceDns::active_slot(size_t resolver, bool tcp, uint64_t* token) {
  for (auto& [t, slot] : slots_) {
    if (slot.resolver == resolver && slot.tcp == tcp && slot.drain_deadline_ms == 0) {
      *token = t;
      return &slot;
    }
  }
  return nullptr;
}

Result<uint64_t> WorkspaceDns::open_slot(size_t resolver, bool tcp) {
  const ResolverRoute& r = resolvers_[resolver];
  StreamRoute route;
  route.resolver = r.address;
  route.udp_associate = !tcp && !r.egress_id.empty();
  uint64_t revision = 0;
  if (!r.egress_id.empty()) {
    route.egress = egresses_(r.egress_id);
    if (!route.egress) return make_error(Code::unavailable, "Egress " + r.egress_id + " is not published");
    revision = route.egress->revision_number();
  }
  const uint64_t token = next_token_++;
  Slot& slot = slots_[token];
  slot.resolver = resolver;
  slot.egress_revision = revision;
  slot.last_used_ms = ctx_.loop.now_ms();
  slot.tcp = tcp;
  auto ch = tcp ? open_tcp_channel(ctx_, *this, token, route) : open_udp_channel(ctx_, *this, token, route);
  auto it = slots_.find(token);
  if (!ch.ok()) {
    if (it != slots_.end()) slots_.erase(it);
    return std::move(ch).error();
  }
  if (it == slots_.end()) return make_error(Code::unavailable, last_errors_[resolver]);  // failed at once
  it->second.channel = std::move(*ch);
  return token;
}

void WorkspaceDns::dispatch(const Dispatch& d) {
  const bool tcp = uses_tcp(d);
  uint64_t token = 0;
  Slot* slot = active_slot(d.resolver, tcp, &token);
  if (slot == nullptr) {
    auto opened = open_slot(d.resolver, tcp);
    if (!opened.ok()) {
      last_errors_[d.resolver] = opened.error().message;
      return run(mux_->resolver_failed(d.resolver, now()));
    }
    token = *opened;
    slot = &slots_.at(token);
  }
  slot->last_used_ms = ctx_.loop.now_ms();
  if (auto st = slot->channel->send(d.message); !st.ok()) {
    last_errors_[d.resolver] = st.error().message;
    close_slot(token);
    run(mux_->resolver_failed(d.resolver, now()));
  }
}

void WorkspaceDns::on_channel_answer(size_t token, ByteView message) {
  auto it = slots_.find(token);
  if (it == slots_.end()) return;
  run(mux_->answer(it->second.resolver, message, now()));
  rearm();
}

void WorkspaceDns::on_channel_failed(size_t token, const std::string& reason) {
  auto it = slots_.find(token);
  if (it == slots_.end()) return;
  const size_t resolver = it->second.resolver;
  const bool active = it->second.drain_deadline_ms == 0;
  last_errors_[resolver] = reason;
  close_slot(token);
  // A draining channel's queries wait for their own timeout: the active channel of
  // the same resolver may still be fine.
  if (active) run(mux_->resolver_failed(resolver, now()));
  rearm();
}

void WorkspaceDns::close_slot(uint64_t token) { slots_.erase(token); }

void WorkspaceDns::run(MuxActions actions) {
  for (const auto& d : actions.deliveries) deliver(d);
  for (const auto& d : actions.dispatches) dispatch(d);
}

void WorkspaceDns::deliver(const Delivery& d) {
  if (!d.origin.is_udp()) {
    auto it = tcp_connections_.find(d.origin.tcp_connection);
    if (it == tcp_connections_.end()) return;
    GuestTcpConnection* conn = it->second.get();
    conn->send_answer(d.message);
    if (tcp_connections_.count(d.origin.tcp_connection) != 0) conn->query_finished();
    return;
  }
  // "Answers go back to the guest from the address and port it asked."
  auto fd = replies_.get(d.origin.asked);
  if (!fd.ok()) return;
  const SocketAddress& guest = d.origin.guest;
  (void)::sendto(*fd, d.message.data(), d.message.size(), MSG_NOSIGNAL, &guest.sa, guest.length());
}

// ---- revisions, timers, status ----

void WorkspaceDns::egress_published(const std::string& egress_id, uint32_t drain_seconds) {
  auto target = egresses_(egress_id);
  const uint64_t now = ctx_.loop.now_ms();
  const uint64_t keep =
      std::min<uint64_t>(uint64_t{drain_seconds} * 1000, static_cast<uint64_t>(options_.attempt_timeout.count()));
  std::vector<uint64_t> close_now;
  for (auto& [token, slot] : slots_) {
    if (resolvers_[slot.resolver].egress_id != egress_id) continue;
    if (target && slot.egress_revision >= target->revision_number()) continue;
    if (slot.drain_deadline_ms != 0) continue;  // keeps its own deadline
    if (keep == 0)
      close_now.push_back(token);
    else
      slot.drain_deadline_ms = now + keep;
  }
  for (uint64_t t : close_now) close_slot(t);
  rearm();
}

void WorkspaceDns::egress_deleted(const std::string& egress_id) {
  std::vector<uint64_t> close_now;
  for (auto& [token, slot] : slots_)
    if (resolvers_[slot.resolver].egress_id == egress_id) close_now.push_back(token);
  for (uint64_t t : close_now) close_slot(t);
}

void WorkspaceDns::on_timer(uring::Timer&) {
  run(mux_->expire(now()));
  const uint64_t now = ctx_.loop.now_ms();
  std::vector<uint64_t> close_now;
  for (auto& [token, slot] : slots_) {
    const bool drained = slot.drain_deadline_ms != 0 && now >= slot.drain_deadline_ms;
    const bool idle = slot.drain_deadline_ms == 0 && now - slot.last_used_ms >= options_.channel_idle_ms &&
                      mux_->in_flight_on(slot.resolver) == 0;
    if (drained || idle) close_now.push_back(token);
  }
  for (uint64_t t : close_now) close_slot(t);
  // RFC 7766 6.2.3: idle guest connections are closed (the guest opens another).
  std::vector<uint64_t> idle_guests;
  for (const auto& [id, conn] : tcp_connections_)
    if (conn->idle_since(now - std::min(now, options_.guest_tcp_idle_ms))) idle_guests.push_back(id);
  for (uint64_t id : idle_guests) on_guest_tcp_closed(id);
  rearm();
}

void WorkspaceDns::rearm() {
  uint64_t at = ctx_.loop.now_ms() + kSweepMs;
  if (auto next = mux_->next_deadline()) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now()).count();
    at = std::min<uint64_t>(at, ctx_.loop.now_ms() + static_cast<uint64_t>(std::max<int64_t>(wait, 0)));
  }
  if (slots_.empty() && tcp_connections_.empty() && !mux_->next_deadline()) return timer_.cancel();
  if (!timer_.armed() || timer_.deadline_ms() > at) ctx_.loop.timers().arm(timer_, at);
}

WorkspaceDnsStatus WorkspaceDns::status() const {
  WorkspaceDnsStatus s;
  s.policy_revision = policy_revision_;
  s.counters = retired_counters_;
  add_counters(s.counters, mux_->counters());
  s.in_flight = mux_->in_flight();
  s.max_in_flight = mux_->max_in_flight();
  for (size_t i = 0; i < resolvers_.size(); ++i) {
    const auto& r = resolvers_[i];
    ResolverState st;
    st.tcp = r.tcp;
    st.address = r.address.to_string();
    st.state = "idle";
    st.egress_id = r.egress_id;
    if (!r.egress_id.empty()) {
      if (auto target = egresses_(r.egress_id)) st.egress_held = target->revision_number();
    }
    for (const auto& [token, slot] : slots_) {
      if (slot.resolver != i || slot.drain_deadline_ms != 0 || !slot.channel || slot.tcp != r.tcp) continue;
      st.state = slot.channel->state();
      st.relay_address = slot.channel->relay_address();
      st.egress_revision = slot.egress_revision;
    }
    st.last_error = last_errors_[i];
    s.resolvers.push_back(std::move(st));
  }
  return s;
}

}  // namespace kib::dns
