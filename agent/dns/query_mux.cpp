#include "agent/dns/query_mux.h"

namespace kib::dns {
namespace {

constexpr uint8_t kRcodeRefused = 5;

}  // namespace

QueryMux::QueryMux(QueryMuxOptions options) : options_(options), ids_(options.resolver_count) {
  if (options_.max_in_flight > 60000) options_.max_in_flight = 60000;  // inside one ID space
}

Result<Dispatch> QueryMux::submit(const GuestOrigin& origin, ByteView query, Clock::time_point now) {
  if (query.size() > options_.max_query_size) {
    counters_.fail(FailureReason::malformed_query);
    return make_error(Code::invalid_argument, "DNS query larger than the agent accepts");
  }
  auto info = inspect_query(query);
  if (!info) {
    counters_.fail(FailureReason::malformed_query);
    return std::move(info).error();
  }
  if (pending_.size() >= options_.max_in_flight || ids_.empty()) {
    counters_.fail(FailureReason::inflight_cap);
    return make_error(Code::resource_exhausted, "DNS queries in flight at the workspace's cap");
  }
  const uint64_t q = next_query_++;
  Pending& p = pending_[q];
  p.origin = origin;
  p.query.assign(query.begin(), query.end());
  p.info = *info;
  MuxActions out;
  if (!dispatch_to(q, p, 0, now, out)) {
    pending_.erase(q);
    counters_.fail(FailureReason::inflight_cap);
    return make_error(Code::resource_exhausted, "no free upstream DNS ID");
  }
  ++counters_.queries;
  counters_.query_bytes += query.size();
  return std::move(out.dispatches.front());
}

bool QueryMux::dispatch_to(uint64_t q, Pending& p, size_t resolver, Clock::time_point now, MuxActions& out) {
  for (; resolver < ids_.size(); ++resolver) {
    auto id = ids_[resolver].allocate(q);
    if (!id) continue;
    p.resolver = resolver;
    p.upstream_id = *id;
    p.deadline = now + options_.attempt_timeout;
    deadlines_.emplace(p.deadline, q);
    Dispatch d{q, resolver, p.query, !p.origin.is_udp()};
    write_id(d.message, *id);
    out.dispatches.push_back(std::move(d));
    return true;
  }
  return false;
}

void QueryMux::unlink(uint64_t q, Pending& p) {
  ids_[p.resolver].release(p.upstream_id);
  deadlines_.erase({p.deadline, q});
}

void QueryMux::fail_over(uint64_t q, FailureReason reason, Clock::time_point now, MuxActions& out) {
  Pending& p = pending_.at(q);
  unlink(q, p);
  if (dispatch_to(q, p, p.resolver + 1, now, out)) {
    ++counters_.failovers;
    return;
  }
  counters_.fail(reason);
  out.deliveries.push_back(Delivery{p.origin, make_reply_from_query(p.query, p.info, kRcodeServfail)});
  pending_.erase(q);
}

MuxActions QueryMux::answer(size_t resolver, ByteView message, Clock::time_point now) {
  MuxActions out;
  auto header = parse_header(message);
  if (!header || !header->is_response()) {
    counters_.fail(FailureReason::malformed_answer);
    return out;
  }
  auto q = resolver < ids_.size() ? ids_[resolver].find(header->id) : std::nullopt;
  if (!q) {
    counters_.fail(FailureReason::unknown_answer);
    return out;
  }
  Pending& p = pending_.at(*q);
  const uint8_t rcode = header->rcode();
  if ((rcode == kRcodeServfail || rcode == kRcodeRefused) && resolver + 1 < ids_.size()) {
    fail_over(*q, FailureReason::upstream_error, now, out);
    return out;
  }
  Bytes reply(message.begin(), message.end());
  write_id(reply, p.info.header.id);
  if (p.origin.is_udp()) reply = fit_answer_to_udp(std::move(reply), p.query, p.info);
  counters_.answer_bytes += reply.size();
  out.deliveries.push_back(Delivery{p.origin, std::move(reply)});
  ++counters_.answers;
  unlink(*q, p);
  pending_.erase(*q);
  return out;
}

MuxActions QueryMux::expire(Clock::time_point now) {
  MuxActions out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t q = deadlines_.begin()->second;
    ++counters_.timeouts;
    fail_over(q, FailureReason::timeout, now, out);
  }
  return out;
}

MuxActions QueryMux::resolver_failed(size_t resolver, Clock::time_point now) {
  MuxActions out;
  std::vector<uint64_t> on_it;
  for (const auto& [q, p] : pending_)
    if (p.resolver == resolver) on_it.push_back(q);
  for (uint64_t q : on_it) fail_over(q, FailureReason::upstream_error, now, out);
  return out;
}

void QueryMux::forget_connection(uint64_t tcp_connection) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.origin.tcp_connection == tcp_connection) {
      unlink(it->first, it->second);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<Clock::time_point> QueryMux::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

}  // namespace kib::dns
