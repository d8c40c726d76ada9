#include <doctest/doctest.h>

#include <set>

#include "agent/dns/query_mux.h"
#include "agent/dns/upstream_ids.h"
#include "dns_test_messages.h"

using namespace kib::dns;
using namespace std::chrono_literals;
using kib::policy::IpAddress;

namespace {

GuestOrigin udp_guest(uint16_t port, const char* asked = "192.0.2.53") {
  return GuestOrigin{SocketAddress::from(*IpAddress::parse("10.0.0.2"), port),
                     SocketAddress::from(*IpAddress::parse(asked), 53), 0};
}

QueryMuxOptions opts(size_t resolvers, size_t cap = 4096) {
  QueryMuxOptions o;
  o.resolver_count = resolvers;
  o.attempt_timeout = 2000ms;
  o.max_in_flight = cap;
  return o;
}

const Clock::time_point t0{};

// The resolver's answer to what it received (same ID).
Bytes resolve(const Dispatch& d, size_t size = 0) {
  return test::answer_for(d.message, size ? size : d.message.size());
}

}  // namespace

TEST_CASE("upstream IDs are unique on a channel and released") {
  UpstreamIds ids;
  std::set<uint16_t> seen;
  for (uint64_t q = 0; q < 65536; ++q) {
    auto id = ids.allocate(q);
    REQUIRE(id.has_value());
    CHECK(seen.insert(*id).second);
  }
  CHECK_FALSE(ids.allocate(99999).has_value());
  ids.release(1234);
  CHECK(ids.allocate(7) == std::optional<uint16_t>(1234));
  CHECK(ids.find(1234) == std::optional<uint64_t>(7));
}

TEST_CASE("the query ID is rewritten upstream and the guest's ID and origin restored") {
  QueryMux mux(opts(1));
  Bytes q = test::query(0x1111, "example.com", 1);
  auto d = mux.submit(udp_guest(5000), q, t0);
  REQUIRE(d.ok());
  CHECK(d->resolver == 0);
  CHECK(std::equal(d->message.begin() + 2, d->message.end(), q.begin() + 2));
  auto out = mux.answer(0, resolve(*d), t0 + 1ms);
  REQUIRE(out.deliveries.size() == 1);
  CHECK(read_id(out.deliveries[0].message) == 0x1111);
  CHECK(out.deliveries[0].origin.guest.port() == 5000);
  CHECK(out.deliveries[0].origin.asked == udp_guest(5000).asked);
  CHECK(mux.in_flight() == 0);
  CHECK(mux.counters().queries == 1);
  CHECK(mux.counters().answers == 1);
  CHECK(mux.counters().query_bytes == q.size());
  CHECK(mux.counters().answer_bytes == out.deliveries[0].message.size());
}

TEST_CASE("two guests asking with the same ID get their own answers") {
  QueryMux mux(opts(1));
  Bytes qa = test::query(1, "a.example", 1);
  Bytes qb = test::query(1, "b.example", 1);
  auto da = mux.submit(udp_guest(1000), qa, t0);
  auto db = mux.submit(udp_guest(2000), qb, t0);
  REQUIRE(da.ok());
  REQUIRE(db.ok());
  CHECK(read_id(da->message) != read_id(db->message));
  // Answers in the opposite order.
  auto ob = mux.answer(0, resolve(*db), t0);
  auto oa = mux.answer(0, resolve(*da), t0);
  REQUIRE(oa.deliveries.size() == 1);
  REQUIRE(ob.deliveries.size() == 1);
  CHECK(oa.deliveries[0].origin.guest.port() == 1000);
  CHECK(ob.deliveries[0].origin.guest.port() == 2000);
  CHECK(read_id(oa.deliveries[0].message) == 1);
  CHECK(oa.deliveries[0].message[kHeaderSize + 1] == 'a');
  CHECK(ob.deliveries[0].message[kHeaderSize + 1] == 'b');
}

TEST_CASE("an answer on another channel or with an unknown ID is dropped and counted") {
  QueryMux mux(opts(2));
  auto d = mux.submit(udp_guest(1), test::query(5, "example.com", 1), t0);
  REQUIRE(d.ok());
  CHECK(mux.answer(1, resolve(*d), t0).deliveries.empty());
  Bytes stray = resolve(*d);
  write_id(stray, static_cast<uint16_t>(read_id(stray) + 1));
  CHECK(mux.answer(0, stray, t0).deliveries.empty());
  CHECK(mux.counters().failed(FailureReason::unknown_answer) == 2);
  CHECK(mux.in_flight() == 1);
}

TEST_CASE("a query (QR clear) or a runt from a resolver is not an answer") {
  QueryMux mux(opts(1));
  auto d = mux.submit(udp_guest(1), test::query(5, "example.com", 1), t0);
  REQUIRE(d.ok());
  CHECK(mux.answer(0, d->message, t0).deliveries.empty());
  CHECK(mux.answer(0, Bytes{1, 2, 3}, t0).deliveries.empty());
  CHECK(mux.counters().failed(FailureReason::malformed_answer) == 2);
}

TEST_CASE("a timed-out query fails over to the next resolver in order") {
  QueryMux mux(opts(3));
  Bytes q = test::query(42, "example.com", 1);
  auto d = mux.submit(udp_guest(1), q, t0);
  REQUIRE(d.ok());
  CHECK(mux.next_deadline() == t0 + 2000ms);
  CHECK(mux.expire(t0 + 1999ms).dispatches.empty());
  auto step1 = mux.expire(t0 + 2000ms);
  REQUIRE(step1.dispatches.size() == 1);
  CHECK(step1.dispatches[0].resolver == 1);
  CHECK(mux.in_flight_on(0) == 0);
  auto step2 = mux.expire(t0 + 4000ms);
  REQUIRE(step2.dispatches.size() == 1);
  CHECK(step2.dispatches[0].resolver == 2);
  // The late answer from resolver 0 no longer counts; resolver 2's does.
  CHECK(mux.answer(0, resolve(*d), t0 + 4001ms).deliveries.empty());
  auto out = mux.answer(2, resolve(step2.dispatches[0]), t0 + 4002ms);
  REQUIRE(out.deliveries.size() == 1);
  CHECK(read_id(out.deliveries[0].message) == 42);
  CHECK(mux.counters().timeouts == 2);
  CHECK(mux.counters().failovers == 2);
}

TEST_CASE("after the last resolver times out the guest gets SERVFAIL") {
  QueryMux mux(opts(2));
  auto d = mux.submit(udp_guest(1), test::query(42, "example.com", 1), t0);
  REQUIRE(d.ok());
  CHECK(mux.expire(t0 + 2s).dispatches.size() == 1);
  auto out = mux.expire(t0 + 4s);
  CHECK(out.dispatches.empty());
  REQUIRE(out.deliveries.size() == 1);
  auto h = parse_header(out.deliveries[0].message);
  REQUIRE(h.ok());
  CHECK(h->id == 42);
  CHECK(h->rcode() == kRcodeServfail);
  CHECK(mux.in_flight() == 0);
  CHECK_FALSE(mux.next_deadline().has_value());
  CHECK(mux.counters().failed(FailureReason::timeout) == 1);
}

TEST_CASE("SERVFAIL or REFUSED from a resolver fails over while another remains") {
  QueryMux mux(opts(2));
  Bytes q = test::query(3, "example.com", 1);
  auto d = mux.submit(udp_guest(1), q, t0);
  REQUIRE(d.ok());
  Bytes refused = test::answer_with_rcode(d->message, 5);
  auto out = mux.answer(0, refused, t0);
  CHECK(out.deliveries.empty());
  REQUIRE(out.dispatches.size() == 1);
  CHECK(out.dispatches[0].resolver == 1);
  // The last resolver's SERVFAIL is the answer.
  out = mux.answer(1, test::answer_with_rcode(out.dispatches[0].message, kRcodeServfail), t0);
  REQUIRE(out.deliveries.size() == 1);
  CHECK(parse_header(out.deliveries[0].message)->rcode() == kRcodeServfail);
}

TEST_CASE("a broken channel fails its queries over at once") {
  QueryMux mux(opts(2));
  for (uint16_t i = 0; i < 10; ++i) REQUIRE(mux.submit(udp_guest(i), test::query(i, "example.com", 1), t0).ok());
  auto out = mux.resolver_failed(0, t0 + 1ms);
  CHECK(out.dispatches.size() == 10);
  for (const auto& d : out.dispatches) CHECK(d.resolver == 1);
  CHECK(mux.in_flight_on(0) == 0);
  CHECK(mux.in_flight_on(1) == 10);
  out = mux.resolver_failed(1, t0 + 2ms);
  CHECK(out.deliveries.size() == 10);
  CHECK(mux.counters().failed(FailureReason::upstream_error) == 10);
}

TEST_CASE("the in-flight cap refuses queries beyond it until answers free room") {
  QueryMux mux(opts(1, 3));
  std::vector<Dispatch> sent;
  for (uint16_t i = 0; i < 3; ++i) sent.push_back(*mux.submit(udp_guest(i), test::query(i, "x.example", 1), t0));
  auto refused = mux.submit(udp_guest(9), test::query(9, "x.example", 1), t0);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == kib::Code::resource_exhausted);
  CHECK(mux.counters().failed(FailureReason::inflight_cap) == 1);
  CHECK(mux.answer(0, resolve(sent[0]), t0).deliveries.size() == 1);
  CHECK(mux.submit(udp_guest(9), test::query(9, "x.example", 1), t0).ok());
}

TEST_CASE("malformed and oversized guest queries are refused and counted") {
  QueryMux mux(opts(1));
  CHECK_FALSE(mux.submit(udp_guest(1), Bytes{1, 2, 3}, t0).ok());
  Bytes huge = test::query(1, "example.com", 1);
  huge.resize(5000);
  CHECK_FALSE(mux.submit(udp_guest(1), huge, t0).ok());
  CHECK(mux.counters().failed(FailureReason::malformed_query) == 2);
  CHECK(mux.in_flight() == 0);
}

TEST_CASE("a UDP guest gets a large answer truncated, a TCP guest gets it whole") {
  QueryMux mux(opts(1));
  Bytes q = test::query(8, "big.example", 16);  // no EDNS0: 512 bytes over UDP
  auto du = mux.submit(udp_guest(1), q, t0);
  GuestOrigin tcp = udp_guest(2);
  tcp.tcp_connection = 77;
  auto dt = mux.submit(tcp, q, t0);
  REQUIRE(du.ok());
  REQUIRE(dt.ok());
  auto ou = mux.answer(0, resolve(*du, 2000), t0);
  auto ot = mux.answer(0, resolve(*dt, 2000), t0);
  REQUIRE(ou.deliveries.size() == 1);
  REQUIRE(ot.deliveries.size() == 1);
  CHECK(parse_header(ou.deliveries[0].message)->truncated());
  CHECK(ou.deliveries[0].message.size() < 512);
  CHECK(ot.deliveries[0].message.size() == 2000);
  CHECK(read_id(ot.deliveries[0].message) == 8);
}

TEST_CASE("an upstream truncated answer is passed to a UDP guest as is") {
  QueryMux mux(opts(1));
  auto d = mux.submit(udp_guest(1), test::query(8, "big.example", 16), t0);
  REQUIRE(d.ok());
  Bytes tc = resolve(*d, 100);
  tc[2] |= 0x02;
  auto out = mux.answer(0, tc, t0);
  REQUIRE(out.deliveries.size() == 1);
  Bytes want = tc;
  write_id(want, 8);
  CHECK(out.deliveries[0].message == want);
}

TEST_CASE("queries of a closed guest TCP connection are forgotten") {
  QueryMux mux(opts(1));
  GuestOrigin tcp = udp_guest(2);
  tcp.tcp_connection = 5;
  auto d = mux.submit(tcp, test::query(1, "a.example", 1), t0);
  REQUIRE(d.ok());
  REQUIRE(mux.submit(udp_guest(3), test::query(2, "a.example", 1), t0).ok());
  mux.forget_connection(5);
  CHECK(mux.in_flight() == 1);
  CHECK(mux.answer(0, resolve(*d), t0).deliveries.empty());
}

TEST_CASE("a thousand queries in flight all get their own answer") {
  QueryMux mux(opts(1));
  std::vector<Dispatch> sent;
  for (uint16_t i = 0; i < 1000; ++i) {
    auto d = mux.submit(udp_guest(static_cast<uint16_t>(10000 + i)), test::query(i, "x.example", 1), t0);
    REQUIRE(d.ok());
    sent.push_back(std::move(*d));
  }
  size_t delivered = 0;
  for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
    auto out = mux.answer(0, resolve(*it), t0);
    REQUIRE(out.deliveries.size() == 1);
    CHECK(out.deliveries[0].origin.guest.port() == 10000 + read_id(out.deliveries[0].message));
    ++delivered;
  }
  CHECK(delivered == 1000);
  CHECK(mux.in_flight() == 0);
}
