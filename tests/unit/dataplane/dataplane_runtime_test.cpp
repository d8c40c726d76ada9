// DataplaneRuntime unprivileged: the WorkspaceAttacher (netns/: nftables, TPROXY,
// namespaces, all root) is replaced by one that hands out ordinary loopback
// listeners, so what the runtime itself does is tested: Egress revisions to every
// worker, placement, acks, relaying through the in-process SOCKS5 server, status,
// counts, metrics, deletion. What stays for the root integration tests: the real
// attacher (rules, transparent listeners, DNS interception in a namespace).
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/dataplane/dataplane_runtime.h"
#include "tests/unit/support/loop_harness.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::dataplane::DataplaneRuntime;
using kib::dataplane::WorkspaceAttacher;
using kib::dataplane::WorkspaceListeners;
using kib::test::Guest;
using kib::test::Socks5Script;
using kib::test::Socks5TestServer;
namespace ctrl = ::kibotos::ctrl::v1;

namespace {

// Hands out one loopback listener per Workspace, a descriptor of it per loop.
struct FakeAttacher final : WorkspaceAttacher {
  std::mutex mu;
  std::map<std::string, sockaddr_in> addrs;
  std::vector<std::string> detached;
  bool fail = false;

  kib::Result<WorkspaceListeners> attach(const std::string& id, const std::string&, const ctrl::NetworkPolicy&,
                                         unsigned n) override {
    if (fail) return kib::Error{kib::Code::failed_precondition, "namespace gone"};
    WorkspaceListeners l;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    kib::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t len = sizeof a;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd.get(), 64) != 0 ||
        getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return kib::Error{kib::Code::internal, "listen"};
    // One socket for all the loops (each its own descriptor of it): an ephemeral
    // SO_REUSEPORT port could be shared with some other process's socket.
    for (unsigned i = 1; i < n; ++i) l.v4.emplace_back(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
    l.v4.insert(l.v4.begin(), std::move(fd));
    std::lock_guard lk(mu);
    addrs[id] = a;
    return l;
  }
  kib::Result<WorkspaceListeners> update(const std::string&, const ctrl::NetworkPolicy&) override {
    return WorkspaceListeners{};
  }
  void detach(const std::string& id) override {
    std::lock_guard lk(mu);
    detached.push_back(id);
  }
  sockaddr_in addr(const std::string& id) {
    std::lock_guard lk(mu);
    return addrs.at(id);
  }
};

template <typename P>
bool wait_until(P pred, Guest* g = nullptr, int cap_ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(cap_ms);
  for (;;) {
    if (g != nullptr) g->pump();
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    if (g != nullptr) {
      pollfd p{g->fd.get(), POLLIN, 0};
      ::poll(&p, 1, 2);
    } else {
      ::poll(nullptr, 0, 1);
    }
  }
}

struct World {
  Socks5TestServer server;
  FakeAttacher attacher;
  std::unique_ptr<DataplaneRuntime> rt;

  explicit World(Socks5Script s = {}, unsigned threads = 2, unsigned workspace_loops = 2) : server(std::move(s)) {
    spdlog::set_level(spdlog::level::warn);
    kib::Config config;
    config.dataplane.threads = threads;
    config.dataplane.workspace_loops = workspace_loops;
    config.egress.allowed_special_purpose_cidrs = {"127.0.0.0/8"};
    config.egress.resolvers = {"127.0.0.1:1"};  // never asked: the endpoints are IP literals
    auto r = DataplaneRuntime::create(config, attacher);
    REQUIRE(r.ok());
    rt = std::move(r.value());
  }
  void publish(uint64_t revision, uint32_t drain_seconds = 0) {
    auto rev = std::make_shared<kib::EgressRevision>();
    rev->egress_id = "eg";
    rev->revision = revision;
    rev->spec.mutable_socks5()->set_address("127.0.0.1:" + std::to_string(server.port()));
    rt->egress_published(rev, drain_seconds);
  }
  static ctrl::NetworkPolicy policy(uint64_t revision, const char* cidr) {
    ctrl::NetworkPolicy p;
    p.set_revision(revision);
    auto* r = p.add_egresses();
    r->set_egress_id("eg");
    r->add_destinations(cidr);
    return p;
  }
  ctrl::NetworkPolicyStatus status(const std::string& ws = "ws") { return rt->workspace_status(ws); }
  bool applied(uint64_t policy_revision, uint64_t egress_revision, const std::string& ws = "ws") {
    auto s = status(ws);
    return s.applied_revision() == policy_revision && s.egresses_size() == 1 &&
           s.egresses(0).applied_revision() == egress_revision;
  }
};

}  // namespace

TEST_CASE("dataplane runtime: publish, apply, relay on the Workspace's loops, status and counts") {
  const int fds_before = kib::test::count_fds();
  {
    World w;
    CHECK(w.rt->loops() == 2);
    w.publish(1);
    REQUIRE(w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(1, "127.0.0.1/32"), 0).ok());
    REQUIRE(wait_until([&] { return w.applied(1, 1); }));
    CHECK(w.status().error().empty());

    // Two guests: the listeners share a port (SO_REUSEPORT), one per loop.
    auto g1 = std::make_unique<Guest>(w.attacher.addr("ws"));
    auto g2 = std::make_unique<Guest>(w.attacher.addr("ws"));
    g1->send("one");
    g2->send("two");
    REQUIRE(wait_until(
        [&] {
      g2->pump();
      return g1->in == "one" && g2->in == "two";
        },
        g1.get()));
    CHECK(w.rt->counts().active_connections == 2);
    CHECK(w.status().egresses(0).active_connections() == 2);
    g1->send("", true);
    g2->send("", true);
    REQUIRE(wait_until(
        [&] {
      g2->pump();
      return g1->eof && g2->eof;
        },
        g1.get()));
    REQUIRE(wait_until([&] { return w.rt->counts().active_connections == 0; }));
    auto m = w.rt->metrics();
    REQUIRE(m.size() == 1);
    CHECK(m[0].workspace_id == "ws");
    REQUIRE(m[0].egresses.size() == 1);
    CHECK(m[0].egresses[0].dial_failures == 0);

    w.rt->workspace_deleted("ws");
    CHECK(w.attacher.detached == std::vector<std::string>{"ws"});
    CHECK(w.status().error() != "");  // not attached any more
  }
  CHECK(kib::test::count_fds() == fds_before);
}

TEST_CASE("dataplane runtime: a new Egress revision is acked by every loop; delete closes its connections") {
  World w;
  w.publish(1);
  REQUIRE(w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(1, "127.0.0.1/32"), 0).ok());
  REQUIRE(wait_until([&] { return w.applied(1, 1); }));
  auto g = std::make_unique<Guest>(w.attacher.addr("ws"));
  g->send("a");
  REQUIRE(wait_until([&] { return g->in == "a"; }, g.get()));
  w.publish(2, /*drain_seconds=*/60);
  REQUIRE(wait_until([&] { return w.applied(1, 2); }));
  REQUIRE(wait_until([&] { return w.rt->counts().draining_connections == 1; }));
  CHECK(w.status().egresses(0).draining_connections() == 1);
  w.rt->egress_deleted("eg");
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, g.get()));
  CHECK(g->reset());
  REQUIRE(wait_until([&] { return w.rt->counts().draining_connections == 0; }));
}

TEST_CASE("dataplane runtime: a policy change that no longer covers a connection drains it") {
  World w(Socks5Script{}, 1, 1);
  w.publish(1);
  REQUIRE(w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(1, "127.0.0.1/32"), 0).ok());
  REQUIRE(wait_until([&] { return w.applied(1, 1); }));
  auto g = std::make_unique<Guest>(w.attacher.addr("ws"));
  g->send("a");
  REQUIRE(wait_until([&] { return g->in == "a"; }, g.get()));
  // drain_seconds 0: closed as soon as the new policy is applied.
  REQUIRE(w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(2, "10.0.0.0/8"), 0).ok());
  REQUIRE(wait_until([&] { return g->error != 0 || g->eof; }, g.get()));
  CHECK(g->reset());
  REQUIRE(wait_until([&] { return w.status().applied_revision() == 2; }));
  // New guests are now uncovered: refused.
  auto g2 = std::make_unique<Guest>(w.attacher.addr("ws"));
  REQUIRE(wait_until([&] { return g2->error != 0 || g2->eof; }, g2.get()));
  CHECK(g2->reset());
  auto m = w.rt->metrics();
  REQUIRE(m.size() == 1);
  CHECK(m[0].refused_uncovered == 1);
}

TEST_CASE("dataplane runtime: a failed attach leaves nothing behind") {
  World w(Socks5Script{}, 1, 1);
  w.attacher.fail = true;
  auto st = w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(1, "127.0.0.1/32"), 0);
  CHECK_FALSE(st.ok());
  CHECK(w.rt->metrics().empty());
  CHECK(w.status().error() != "");
  w.attacher.fail = false;
  REQUIRE(w.rt->workspace_applied("ws", "/proc/self/ns/net", World::policy(1, "127.0.0.1/32"), 0).ok());
  CHECK(w.rt->metrics().size() == 1);
}
