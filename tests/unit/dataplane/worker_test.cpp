// Worker on its own thread and ring, unprivileged: an ordinary loopback listener in
// place of the TPROXY one (its accepted sockets' local address is the "original
// destination"), the in-process SOCKS5 server as the Egress, and a clock the test
// moves on for the drain deadline. Cases: accept -> relay -> close, uncovered
// destination refused, per-workspace limit refused, Egress not published, a new
// revision drains older connections, delete_egress and stop() close them.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/dataplane/worker.h"
#include "tests/unit/support/loop_harness.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::dataplane::EgressStats;
using kib::dataplane::Worker;
using kib::dataplane::WorkerHost;
using kib::dataplane::WorkerOptions;
using kib::dataplane::WorkspacePlan;
using kib::dataplane::WorkspaceStats;
using kib::test::Guest;
using kib::test::GuestListener;
using kib::test::Socks5Script;
using kib::test::Socks5Seen;
using kib::test::Socks5TestServer;
using Then = Socks5Script::Then;

namespace {

struct Host final : WorkerHost {
  std::atomic<int> egress_acks{0};
  std::atomic<int> policy_acks{0};
  std::atomic<uint64_t> last_egress_revision{0};
  void ack_egress(unsigned, const std::string&, uint64_t revision) override {
    last_egress_revision = revision;
    ++egress_acks;
  }
  void ack_policy(unsigned, const std::string&, uint64_t) override { ++policy_acks; }
};

// Bounded real-time wait (the worker runs on its own thread): pumps the guests, and
// sleeps in poll() on the first one between checks.
template <typename P>
bool wait_until(P pred, std::initializer_list<Guest*> guests = {}, int cap_ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(cap_ms);
  for (;;) {
    for (Guest* g : guests) g->pump();
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    if (guests.size() > 0) {
      pollfd p{(*guests.begin())->fd.get(), POLLIN, 0};
      ::poll(&p, 1, 2);
    } else {
      ::poll(nullptr, 0, 1);
    }
  }
}

struct World {
  std::atomic<uint64_t> now{1'000'000};
  Host host;
  std::atomic<int64_t> total{0};
  std::atomic<uint64_t> next_id{100};
  kib::policy::EndpointAddressPolicy policy{{kib::policy::Cidr::parse("127.0.0.0/8").value()}};
  Socks5TestServer server;
  GuestListener listener;
  std::shared_ptr<WorkspaceStats> stats = std::make_shared<WorkspaceStats>();
  WorkerOptions opts;
  std::unique_ptr<Worker> worker;

  explicit World(Socks5Script s, uint32_t per_workspace = 100, kib::dataplane::AccessLog* access_log = nullptr)
      : server(std::move(s)) {
    opts.access_log = access_log;
    opts.loop.sq_entries = 256;
    opts.loop.buffer_count = 64;
    opts.loop.file_slots = 64;
    opts.loop.clock = [this] { return now.load(); };
    opts.max_connections_per_workspace = per_workspace;
    opts.total_connections = &total;
    opts.next_connection_id = &next_id;
    opts.address_policy = &policy;
    opts.resolver.servers = {"127.0.0.1:1"};  // never asked: the endpoints are IP literals
    worker = std::make_unique<Worker>(0, host, opts);
    REQUIRE(worker->start().ok());
  }

  kib::relay::DialTargetPtr target(uint64_t revision) {
    auto t = std::make_shared<kib::relay::DialTarget>();
    auto rev = std::make_shared<kib::EgressRevision>();
    rev->egress_id = "eg";
    rev->revision = revision;
    t->revision = rev;
    t->endpoint = {"127.0.0.1", server.port(), kib::policy::IpAddress::parse("127.0.0.1").value()};
    return t;
  }
  void publish(uint64_t revision, uint32_t drain_seconds = 0, Worker* on = nullptr) {
    const int acks = host.egress_acks;
    (on ? on : worker.get())->publish_egress(target(revision), drain_seconds);
    REQUIRE(wait_until([&] { return host.egress_acks == acks + 1; }));
  }
  // Routes `cidr` through `egress_id`.
  void apply(const char* cidr, const char* egress_id = "eg", Worker* on = nullptr) {
    ::kibotos::ctrl::v1::NetworkPolicy p;
    auto* r = p.add_egresses();
    r->set_egress_id(egress_id);
    r->add_destinations(cidr);
    auto plan = std::make_shared<WorkspacePlan>();
    plan->id = "ws";
    plan->policy_revision = 1;
    plan->routes = kib::policy::RouteMatcher::compile(p).value();
    plan->stats = stats;
    const int acks = host.policy_acks;
    (on ? on : worker.get())
        ->apply_workspace(plan, std::make_shared<kib::UniqueFd>(::dup(listener.fd.get())), nullptr, 0);
    REQUIRE(wait_until([&] { return host.policy_acks == acks + 1; }));
  }
  std::shared_ptr<EgressStats> egress(const char* id = "eg") { return stats->egress(id); }
  std::unique_ptr<Guest> connect() { return std::make_unique<Guest>(listener.addr); }
  // The worker's answer to list_connections, waited for.
  std::vector<::kibotos::ctrl::v1::Connection> list(const std::string& workspace_id, uint64_t after, size_t limit) {
    std::promise<std::vector<::kibotos::ctrl::v1::Connection>> p;
    auto f = p.get_future();
    worker->list_connections(workspace_id, after, limit, [&p](auto v) { p.set_value(std::move(v)); });
    REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    return f.get();
  }
};

std::vector<uint64_t> ids_of(const std::vector<::kibotos::ctrl::v1::Connection>& cs) {
  std::vector<uint64_t> out;
  for (const auto& c : cs) out.push_back(c.connection_id());
  return out;
}

Socks5Script then(Then t) {
  Socks5Script s;
  s.then = t;
  return s;
}

}  // namespace

TEST_CASE("worker: accept -> dial -> relay -> close, counters back to zero") {
  const int fds_before = kib::test::count_fds();
  {
    World w(then(Then::echo));
    w.publish(1);
    w.apply("127.0.0.1/32");
    auto g = w.connect();
    g->send("through the worker", true);
    REQUIRE(wait_until([&] { return g->eof || g->error != 0; }, {g.get()}));
    CHECK(g->error == 0);
    CHECK(g->in == "through the worker");
    CHECK(w.server.seen().last_destination == "127.0.0.1:" + std::to_string(w.listener.port()));
    REQUIRE(wait_until([&] { return w.stats->connections == 0 && w.total == 0; }));
    CHECK(w.egress()->active == 0);
    CHECK(w.egress()->dial_failures == 0);
    w.worker->stop();
  }
  CHECK(kib::test::count_fds() == fds_before);
}

TEST_CASE("worker: a destination no route covers is refused with an RST") {
  World w(then(Then::echo));
  w.publish(1);
  w.apply("10.0.0.0/8");
  auto g = w.connect();
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
  CHECK(g->reset());
  CHECK(w.stats->refused_uncovered == 1);
  CHECK(w.server.seen().connections == 0);
}

TEST_CASE("worker: past the per-workspace limit a guest is refused; the others go on") {
  World w(then(Then::echo), /*per_workspace=*/1);
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g1 = w.connect();
  g1->send("one");
  REQUIRE(wait_until([&] { return g1->in == "one"; }, {g1.get()}));
  auto g2 = w.connect();
  REQUIRE(wait_until([&] { return g2->error != 0 || g2->eof; }, {g2.get()}));
  CHECK(g2->reset());
  CHECK(w.stats->refused_over_limit == 1);
  g1->send("two", true);
  REQUIRE(wait_until([&] { return g1->eof || g1->error != 0; }, {g1.get()}));
  CHECK(g1->in == "onetwo");
  REQUIRE(wait_until([&] { return w.stats->connections == 0; }));
  // Room again.
  auto g3 = w.connect();
  g3->send("three", true);
  REQUIRE(wait_until([&] { return g3->eof || g3->error != 0; }, {g3.get()}));
  CHECK(g3->in == "three");
}

TEST_CASE("worker: a route to an Egress not published yet fails the dial") {
  World w(then(Then::echo));
  w.apply("127.0.0.1/32", "eg-missing");
  auto g = w.connect();
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
  CHECK(g->reset());
  auto es = w.egress("eg-missing");
  CHECK(es->dial_failures == 1);
  CHECK(es->dial_failed_by[static_cast<size_t>(kib::relay::DialCause::local)] == 1);
  CHECK(es->opened == 1);
  CHECK(es->closed[static_cast<size_t>(kib::relay::CloseReason::dial_failed)] == 1);
  CHECK(es->last_failure().message.find("not published") != std::string::npos);
  CHECK(es->last_failure().consecutive == 1);
}

TEST_CASE("worker: a connection to an Egress not published yet has its access log line") {
  char dir[] = "/tmp/kib-worker-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/access.log";
  {
    auto log = kib::dataplane::AccessLog::open(path, 100);
    REQUIRE(log.ok());
    World w(then(Then::echo), 100, log.value().get());
    w.apply("127.0.0.1/32", "eg-missing");
    auto g = w.connect();
    REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
    REQUIRE(wait_until([&] { return log.value()->written() == 1; }));
    w.worker->stop();
  }
  std::ifstream in(path);
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line.find("\"egress_id\":\"eg-missing\"") != std::string::npos);
  CHECK(line.find("\"close_reason\":\"dial_failed\"") != std::string::npos);
  CHECK(line.find("\"dial_cause\":\"local\"") != std::string::npos);
  CHECK(line.find("\"guest\":\"127.0.0.1:") != std::string::npos);
  CHECK_FALSE(std::getline(in, line));
  std::filesystem::remove_all(dir);
}

TEST_CASE("worker: a failed dial is counted with its reason") {
  Socks5Script s = then(Then::echo);
  s.reply = 5;
  World w(s);
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g = w.connect();
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
  CHECK(g->reset());
  REQUIRE(wait_until([&] { return w.egress()->dial_failures == 1; }));
  CHECK(w.egress()->dial_refusals == 0);
  CHECK(w.egress()->dial_failed_by[static_cast<size_t>(kib::relay::DialCause::socks5)] == 1);
  const auto f = w.egress()->last_failure();
  CHECK(f.message == "dial failed: socks5: connection_refused");
  CHECK(f.consecutive == 1);
  CHECK(f.at.time_since_epoch().count() > 0);
  REQUIRE(wait_until([&] { return w.stats->connections == 0; }));
  CHECK(w.egress()->closed[static_cast<size_t>(kib::relay::CloseReason::dial_failed)] == 1);
  // A dial that succeeds clears it (the counters keep the history).
  w.egress()->record_success();
  CHECK(w.egress()->last_failure().message.empty());
  CHECK(w.egress()->last_failure().consecutive == 0);
  CHECK(w.egress()->dial_failures == 1);
}

TEST_CASE("worker: a new Egress revision drains older connections until the deadline") {
  World w(then(Then::echo));
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g = w.connect();
  g->send("a");
  REQUIRE(wait_until([&] { return g->in == "a"; }, {g.get()}));
  REQUIRE(w.egress()->active == 1);
  w.publish(2, /*drain_seconds=*/5);
  CHECK(w.egress()->draining == 1);
  CHECK(w.egress()->active == 0);
  w.now += 4000;  // still within the drain
  g->send("b");
  REQUIRE(wait_until([&] { return g->in == "ab"; }, {g.get()}));
  w.now += 2000;  // past it: the loop's next tick closes it
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
  CHECK(g->reset());
  REQUIRE(wait_until([&] { return w.egress()->draining == 0 && w.stats->connections == 0; }));
  CHECK(w.egress()->closed[static_cast<size_t>(kib::relay::CloseReason::drain_deadline)] == 1);
  // New connections take the new revision.
  auto g2 = w.connect();
  g2->send("c", true);
  REQUIRE(wait_until([&] { return g2->eof || g2->error != 0; }, {g2.get()}));
  CHECK(g2->in == "c");
  REQUIRE(wait_until([&] { return w.stats->connections == 0; }));
  // Counted across the revisions: both connections, every byte each way.
  CHECK(w.egress()->opened == 2);
  CHECK(w.egress()->closed[static_cast<size_t>(kib::relay::CloseReason::guest_closed)] == 1);
  CHECK(w.egress()->traffic.from_guest == 3);
  CHECK(w.egress()->traffic.to_guest == 3);
}

TEST_CASE("worker: delete_egress and stop close live connections") {
  World w(then(Then::echo));
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g = w.connect();
  g->send("a");
  REQUIRE(wait_until([&] { return g->in == "a"; }, {g.get()}));
  w.worker->delete_egress("eg");
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, {g.get()}));
  CHECK(g->reset());
  REQUIRE(wait_until([&] { return w.stats->connections == 0; }));
  CHECK(w.egress()->closed[static_cast<size_t>(kib::relay::CloseReason::agent_closed)] == 1);

  w.publish(2);
  auto g2 = w.connect();
  g2->send("b");
  REQUIRE(wait_until([&] { return g2->in == "b"; }, {g2.get()}));
  w.worker->stop();
  g2->pump();
  CHECK(g2->reset());
  CHECK(w.stats->connections == 0);
  CHECK(w.total == 0);
}

TEST_CASE("worker: stop_accepting (take-over) keeps live connections relaying and accepts no more") {
  World w(then(Then::echo));
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g = w.connect();
  g->send("before", false);
  REQUIRE(wait_until([&] { return g->in == "before"; }, {g.get()}));
  const int fds = kib::test::count_fds();
  w.worker->stop_accepting();
  // The worker's share of the listening socket closes (the test keeps its own open,
  // as the next agent's listeners keep the SO_REUSEPORT group).
  REQUIRE(wait_until([&] { return kib::test::count_fds() == fds - 1; }));
  auto late = w.connect();
  g->send(" after", true);
  REQUIRE(wait_until([&] { return g->eof || g->error != 0; }, {g.get(), late.get()}));
  CHECK(g->error == 0);
  CHECK(g->in == "before after");
  CHECK(w.server.seen().connections == 1);  // the late guest was never relayed
  CHECK(late->in.empty());
  REQUIRE(wait_until([&] { return w.stats->connections == 0; }));
}

TEST_CASE("worker: move_connections hands established plain relays on; another worker adopts and relays them on") {
  World w(then(Then::echo));
  w.publish(1);
  w.apply("127.0.0.1/32");
  // The next agent's worker: its own counters, the same Workspace and Egress.
  std::atomic<int64_t> next_total{0};
  std::atomic<uint64_t> inherited{0};
  WorkerOptions next_opts = w.opts;
  next_opts.total_connections = &next_total;
  next_opts.inherited_connections = &inherited;
  Worker next(1, w.host, next_opts);
  REQUIRE(next.start().ok());
  w.publish(1, 0, &next);
  w.apply("127.0.0.1/32", "eg", &next);
  next.stop_accepting();  // only the old worker accepts the guests below

  auto idle = w.connect();
  idle->send("hello");
  const size_t n = 4u << 20;
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>('a' + i * 7 % 26);
  auto bulk = w.connect();
  bulk->send(data, true);
  REQUIRE(wait_until([&] { return idle->in == "hello" && bulk->in.size() > (256u << 10); }, {idle.get(), bulk.get()}));

  std::mutex mu;
  std::vector<std::pair<std::string, kib::relay::MovedRelay>> moved;
  std::atomic<bool> done{false};
  w.worker->stop_accepting();
  w.worker->move_connections(
      [&](const std::string& id, kib::relay::MovedRelay m) {
    std::lock_guard lk(mu);
    moved.emplace_back(id, std::move(m));
      },
      [&] { done = true; });
  REQUIRE(wait_until([&] { return done.load(); }));
  REQUIRE(moved.size() == 2);
  CHECK(moved[0].first == "ws");
  REQUIRE(wait_until([&] { return w.total == 0; }));  // the old worker let them go, sockets untouched
  for (auto& [id, m] : moved) next.adopt(id, std::make_shared<kib::relay::MovedRelay>(std::move(m)));
  REQUIRE(wait_until([&] { return inherited == 2; }));

  idle->send(" again", true);
  REQUIRE(wait_until([&] { return (idle->eof || idle->error != 0) && (bulk->eof || bulk->error != 0); },
                     {idle.get(), bulk.get()}, 10000));
  CHECK(idle->error == 0);
  CHECK(idle->in == "hello again");
  CHECK(bulk->error == 0);
  CHECK(bulk->in.size() == n);
  CHECK((bulk->in == data));
  CHECK(w.server.seen().connections == 2);  // no connection was dialed again
  REQUIRE(wait_until([&] { return next_total == 0 && w.stats->connections == 0; }));
  next.stop();
}

TEST_CASE("worker: list_connections pages by ID, oldest first, with each connection's view") {
  namespace v1 = ::kibotos::ctrl::v1;
  World w(then(Then::echo));
  w.publish(1);
  w.apply("127.0.0.1/32");
  std::vector<std::unique_ptr<Guest>> guests;
  for (int i = 0; i < 5; ++i) {
    guests.push_back(w.connect());
    guests.back()->send("x");
    REQUIRE(wait_until([&] { return guests.back()->in == "x"; }, {guests.back().get()}));
  }
  w.now += 1500;
  const auto all = w.list("ws", 0, 10);
  REQUIRE(ids_of(all) == std::vector<uint64_t>{100, 101, 102, 103, 104});
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& c = all[i];
    CHECK(c.workspace_id() == "ws");
    CHECK(c.egress_id() == "eg");
    CHECK(c.egress_revision() == 1);
    CHECK(c.state() == v1::CONNECTION_STATE_RELAYING);
    CHECK(c.bytes_from_guest() == 1);
    CHECK(c.bytes_to_guest() == 1);
    CHECK(c.age_ms() >= 1500);
    CHECK(c.original_destination() == "127.0.0.1:" + std::to_string(w.listener.port()));
    // The guest's own address and port, as its socket has it.
    sockaddr_in local{};
    socklen_t len = sizeof local;
    REQUIRE(getsockname(guests[i]->fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0);
    CHECK(c.guest_address() == "127.0.0.1:" + std::to_string(ntohs(local.sin_port)));
  }
  // Pages: the smallest IDs above the cursor, never one twice.
  CHECK(ids_of(w.list("ws", 0, 2)) == std::vector<uint64_t>{100, 101});
  CHECK(ids_of(w.list("", 101, 2)) == std::vector<uint64_t>{102, 103});
  CHECK(ids_of(w.list("ws", 103, 2)) == std::vector<uint64_t>{104});
  CHECK(w.list("ws", 104, 2).empty());
  CHECK(w.list("another", 0, 10).empty());
  // A new revision drains them: shown as draining on their own revision.
  w.publish(2, /*drain_seconds=*/60);
  for (const auto& c : w.list("ws", 0, 10)) {
    CHECK(c.state() == v1::CONNECTION_STATE_DRAINING);
    CHECK(c.egress_revision() == 1);
  }
  // One that ended leaves the view; the others keep their IDs.
  guests[1]->send("", true);
  REQUIRE(wait_until([&] { return guests[1]->eof; }, {guests[1].get()}));
  REQUIRE(wait_until([&] { return w.list("ws", 0, 10).size() == 4; }));
  CHECK(ids_of(w.list("ws", 0, 10)) == std::vector<uint64_t>{100, 102, 103, 104});
}

TEST_CASE("worker: a connection still dialing is listed as dialing") {
  Socks5Script s;
  s.handshake = Socks5Script::Handshake::stall;
  World w(std::move(s));
  w.publish(1);
  w.apply("127.0.0.1/32");
  auto g = w.connect();
  REQUIRE(wait_until([&] { return w.egress()->active == 1; }));
  const auto cs = w.list("ws", 0, 10);
  REQUIRE(cs.size() == 1);
  CHECK(cs[0].state() == ::kibotos::ctrl::v1::CONNECTION_STATE_DIALING);
  CHECK(cs[0].bytes_from_guest() == 0);
}
