// WorkspaceService (API.md), its references to Egresses, and AgentService.GetAgent.
// /proc/self/ns/net stands in for an existing network namespace: it is one, and
// /proc/thread-self/ns/net is the same namespace under another path.
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "agent/api/services/netns_identity.h"
#include "agent/store/store.h"
#include "tests/unit/services/service_harness.h"

using namespace kib;
using namespace kib::test;

namespace {

const char* kNetns = "/proc/self/ns/net";

ctrl::NetworkPolicy isolated() {
  ctrl::NetworkPolicy p;
  p.set_mode(ctrl::NETWORK_MODE_ISOLATED);
  return p;
}

ctrl::NetworkPolicy through(const std::string& egress_id, const std::string& cidr = "0.0.0.0/0") {
  ctrl::NetworkPolicy p;
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  auto* r = p.add_egresses();
  r->set_egress_id(egress_id);
  r->add_destinations(cidr);
  return p;
}

ctrl::NetworkPolicy udp_resolver_via(const std::string& egress_id) {
  ctrl::NetworkPolicy p;
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  auto* r = p.add_resolvers();
  r->mutable_udp()->set_address("203.0.113.53:53");
  r->set_egress_id(egress_id);
  return p;
}

ctrl::NetworkPolicy tcp_resolver_via(const std::string& egress_id) {
  ctrl::NetworkPolicy p;
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  auto* r = p.add_resolvers();
  r->mutable_tcp()->set_address("203.0.113.53:53");
  r->set_egress_id(egress_id);
  return p;
}

std::string egress(Harness& h, bool udp = false) {
  auto spec = socks5("203.0.113.5:1080");
  spec.set_udp_enabled(udp);
  auto e = h.create_egress(spec);
  REQUIRE(e.ok());
  return e->egress().egress_id();
}

// "dev:ino" of a namespace path, as the runtime hears it.
std::string identity(const char* path) {
  struct stat st {};
  REQUIRE(::stat(path, &st) == 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

bool has_leftovers_call(const std::vector<std::string>& events) {
  for (const auto& e : events)
    if (e.rfind("leftovers_removed ", 0) == 0) return true;
  return false;
}

// Reads or rewrites the stored namespace identity of a Workspace with the agent down
// (the control plane closed, then opened again without publishing).
std::optional<store::NetnsKey> stored_key(Harness& h, const std::string& id,
                                          std::optional<store::NetnsKey> rewrite = std::nullopt) {
  h.plane.reset();
  std::optional<store::NetnsKey> key;
  {
    auto s = store::Store::open(h.config.state_dir);
    REQUIRE(s.ok());
    REQUIRE((*s)->write([&](store::Transaction& txn) -> Status {
                  if (rewrite) KIB_TRY(txn.set_netns_key(id, *rewrite));
                  auto k = txn.netns_key(id);
                  if (!k.ok()) return std::move(k).error();
                  key = *k;
                  return {};
                })
                .ok());
  }
  h.open();
  return key;
}

std::string key_text(const std::optional<store::NetnsKey>& k) {
  return k ? std::to_string(k->dev) + ":" + std::to_string(k->ino) : "none";
}

// The Workspace's status error once a retry enforced it (empty), or after 2 s of
// retries.
std::string status_error_after_retries(Harness& h, const std::string& id) {
  std::string error = "not retried";
  for (int i = 0; i < 200 && !error.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    error = h.get_workspace(id)->workspace().network_policy_status().error();
  }
  return error;
}

ctrl::Workspace must_create(Harness& h, const ctrl::NetworkPolicy& p, const char* netns = kNetns) {
  auto w = h.create_workspace(netns, p);
  REQUIRE_MESSAGE(w.ok(), (w.ok() ? "" : w.error().message));
  return w->workspace();
}

}  // namespace

TEST_CASE("CreateWorkspace: stores the Workspace with policy revision 1 and hands it to the runtime") {
  Harness h;
  std::string eg = egress(h);
  h.runtime.clear();
  auto p = through(eg);
  p.set_revision(99);  // "network_policy.revision is ignored" in writes
  auto w = must_create(h, p);
  CHECK(w.workspace_id().rfind("ws-", 0) == 0);
  CHECK(w.netns() == kNetns);
  CHECK(w.network_policy().revision() == 1);
  CHECK(w.created_at().SerializeAsString() == w.updated_at().SerializeAsString());
  CHECK(w.network_policy_status().applied_revision() == 1);
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"workspace_applied " + w.workspace_id() + " " + kNetns + " r1 drain 0"});
  auto g = h.get_workspace(w.workspace_id());
  REQUIRE(g.ok());
  CHECK(g->workspace().network_policy().egresses(0).egress_id() == eg);
}

TEST_CASE("CreateWorkspace: a missing namespace is failed_precondition") {
  Harness h;
  CHECK(code_of(h.create_workspace("/run/netns/kibotos-does-not-exist", isolated())) == Code::failed_precondition);
  CHECK(code_of(h.create_workspace("relative/path", isolated())) == Code::failed_precondition);
}

TEST_CASE("CreateWorkspace: a path that is not a network namespace is failed_precondition") {
  Harness h;
  CHECK(code_of(h.create_workspace("/proc/self/ns/uts", isolated())) == Code::failed_precondition);
  CHECK(code_of(h.create_workspace(h.config.state_dir + "/state.db", isolated())) == Code::failed_precondition);
  CHECK(code_of(h.create_workspace("/", isolated())) == Code::failed_precondition);
}

TEST_CASE("CreateWorkspace: a namespace already attached is failed_precondition, by identity not by path") {
  Harness h;
  auto w = must_create(h, isolated());
  CHECK(code_of(h.create_workspace(kNetns, isolated())) == Code::failed_precondition);
  CHECK(code_of(h.create_workspace("/proc/thread-self/ns/net", isolated())) == Code::failed_precondition);
  // After the delete the namespace can be attached again.
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(h.create_workspace("/proc/thread-self/ns/net", isolated()).ok());
}

TEST_CASE("CreateWorkspace: a namespace the runtime refuses (the agent's own) is failed_precondition") {
  Harness h;
  auto key = kib::api::network_namespace_identity(kNetns);
  REQUIRE(key.ok());
  h.runtime.refused_namespace = *key;
  h.runtime.clear();
  auto r = h.create_workspace(kNetns, isolated());
  CHECK(code_of(r) == Code::failed_precondition);
  CHECK(r.error().message.find("is refused") != std::string::npos);
  CHECK(h.runtime.events().empty());  // nothing applied
  h.runtime.refused_namespace.reset();
  CHECK(h.create_workspace(kNetns, isolated()).ok());  // nothing was stored either
}

TEST_CASE("NetworkPolicy: mode unspecified is invalid_argument") {
  Harness h;
  CHECK(code_of(h.create_workspace(kNetns, ctrl::NetworkPolicy())) == Code::invalid_argument);
}

TEST_CASE("NetworkPolicy: ISOLATED with egresses or resolvers is invalid_argument (nothing leaves)") {
  Harness h;
  std::string eg = egress(h, true);
  auto p = through(eg);
  p.set_mode(ctrl::NETWORK_MODE_ISOLATED);
  CHECK(code_of(h.create_workspace(kNetns, p)) == Code::invalid_argument);
  auto q = udp_resolver_via(eg);
  q.set_mode(ctrl::NETWORK_MODE_ISOLATED);
  CHECK(code_of(h.create_workspace(kNetns, q)) == Code::invalid_argument);
}

TEST_CASE("NetworkPolicy: bad CIDRs, port ranges and resolver addresses are invalid_argument") {
  Harness h;
  std::string eg = egress(h);
  CHECK(code_of(h.create_workspace(kNetns, through(eg, "10.0.0.1/8"))) == Code::invalid_argument);
  CHECK(code_of(h.create_workspace(kNetns, through(eg, "not-a-cidr"))) == Code::invalid_argument);
  auto p = through(eg);
  auto* pr = p.mutable_egresses(0)->add_ports();
  pr->set_first(443);
  pr->set_last(80);
  CHECK(code_of(h.create_workspace(kNetns, p)) == Code::invalid_argument);
  auto r = udp_resolver_via("");
  r.mutable_resolvers(0)->mutable_udp()->set_address("dns.example:53");
  CHECK(code_of(h.create_workspace(kNetns, r)) == Code::invalid_argument);
  auto none = udp_resolver_via("");
  none.mutable_resolvers(0)->clear_transport();
  CHECK(code_of(h.create_workspace(kNetns, none)) == Code::invalid_argument);
}

TEST_CASE("NetworkPolicy: an unknown or deleted Egress (route or resolver) is not_found") {
  Harness h;
  CHECK(code_of(h.create_workspace(kNetns, through("eg-unknown"))) == Code::not_found);
  std::string eg = egress(h, true);
  REQUIRE(h.delete_egress(eg).ok());
  CHECK(code_of(h.create_workspace(kNetns, through(eg))) == Code::not_found);
  CHECK(code_of(h.create_workspace(kNetns, udp_resolver_via(eg))) == Code::not_found);
  auto w = must_create(h, isolated());
  CHECK(code_of(h.update_policy(w.workspace_id(), 1, through(eg))) == Code::not_found);
}

TEST_CASE("NetworkPolicy: a udp Resolver through an Egress without udp_enabled is failed_precondition") {
  Harness h;
  std::string no_udp = egress(h, false);
  CHECK(code_of(h.create_workspace(kNetns, udp_resolver_via(no_udp))) == Code::failed_precondition);
  // A tcp Resolver through the same Egress is fine.
  auto tcp = udp_resolver_via(no_udp);
  tcp.mutable_resolvers(0)->mutable_tcp()->set_address("203.0.113.53:53");
  CHECK(h.create_workspace(kNetns, tcp).ok());
}

TEST_CASE("UpdateNetworkPolicy: the revision moves by one only when the content changes") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, isolated());
  h.runtime.clear();
  auto same = h.update_policy(w.workspace_id(), 1, isolated());
  REQUIRE(same.ok());
  CHECK(same->workspace().network_policy().revision() == 1);
  CHECK(h.runtime.events().empty());
  auto changed = h.update_policy(w.workspace_id(), 1, through(eg));
  REQUIRE(changed.ok());
  CHECK(changed->workspace().network_policy().revision() == 2);
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"workspace_applied " + w.workspace_id() + " " + kNetns + " r2 drain 600"});
  CHECK(code_of(h.update_policy(w.workspace_id(), 1, isolated())) == Code::aborted);
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy().revision() == 2);
}

TEST_CASE("UpdateNetworkPolicy: after the system clock is stepped back, updated_at does not go back") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, isolated());
  h.advance(-std::chrono::hours(1));
  auto changed = h.update_policy(w.workspace_id(), 1, through(eg));
  REQUIRE(changed.ok());
  CHECK(changed->workspace().updated_at().SerializeAsString() == w.updated_at().SerializeAsString());
  CHECK(changed->workspace().created_at().SerializeAsString() == w.created_at().SerializeAsString());
}

TEST_CASE("UpdateNetworkPolicy: network_policy.revision is ignored; the server assigns it") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, through(eg));
  h.runtime.clear();
  // The same content under another revision number is the same policy: nothing moves.
  auto same = through(eg);
  same.set_revision(7);
  auto u = h.update_policy(w.workspace_id(), 1, same);
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? "" : u.error().message));
  CHECK(u->workspace().network_policy().revision() == 1);
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy().revision() == 1);
  CHECK(h.runtime.events().empty());
  // New content counts from the stored revision, not from the one sent.
  auto changed = isolated();
  changed.set_revision(7);
  auto c = h.update_policy(w.workspace_id(), 1, changed);
  REQUIRE(c.ok());
  CHECK(c->workspace().network_policy().revision() == 2);
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"workspace_applied " + w.workspace_id() + " " + kNetns + " r2 drain 600"});
}

TEST_CASE("UpdateEgress never changes the revision of a policy that references the Egress") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, through(eg));
  REQUIRE(h.update_egress(eg, 1, socks5("203.0.113.9:1080")).ok());
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy().revision() == 1);
}

TEST_CASE("DeleteEgress: while a non-deleted Workspace's policy references it, failed_precondition") {
  Harness h;
  std::string by_route = egress(h, false), by_resolver = egress(h, true);
  auto p = through(by_route);
  *p.add_resolvers() = udp_resolver_via(by_resolver).resolvers(0);
  auto w = must_create(h, p);
  CHECK(code_of(h.delete_egress(by_route)) == Code::failed_precondition);
  CHECK(code_of(h.delete_egress(by_resolver)) == Code::failed_precondition);
  CHECK(h.get_egress(by_route).ok());
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(h.delete_egress(by_route).ok());
  CHECK(h.delete_egress(by_resolver).ok());
}

TEST_CASE("DeleteEgress: a policy update that drops the reference releases the Egress") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, through(eg));
  REQUIRE(h.update_policy(w.workspace_id(), 1, isolated()).ok());
  CHECK(h.delete_egress(eg).ok());
}

TEST_CASE("DeleteEgress: a tcp Resolver's egress_id is a reference too: failed_precondition") {
  Harness h;
  std::string eg = egress(h, false);
  auto w = must_create(h, tcp_resolver_via(eg));
  CHECK(code_of(h.delete_egress(eg)) == Code::failed_precondition);
  auto still = h.get_egress(eg);
  REQUIRE(still.ok());
  CHECK(still->egress().revision() == 1);
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(h.delete_egress(eg).ok());
}

TEST_CASE("udp_enabled off while a udp Resolver of a non-deleted Workspace uses the Egress is failed_precondition") {
  Harness h;
  std::string eg = egress(h, true);
  auto w = must_create(h, udp_resolver_via(eg));
  auto off = socks5("203.0.113.5:1080");
  CHECK(code_of(h.update_egress(eg, 1, off)) == Code::failed_precondition);
  CHECK(h.get_egress(eg)->egress().spec().udp_enabled());
  // Other changes that keep udp_enabled are fine.
  auto moved = off;
  moved.mutable_socks5()->set_address("203.0.113.6:1080");
  moved.set_udp_enabled(true);
  REQUIRE(h.update_egress(eg, 1, moved).ok());
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(h.update_egress(eg, 2, off).ok());
}

TEST_CASE("udp_enabled off is allowed while only routes and tcp Resolvers use the Egress") {
  Harness h;
  std::string eg = egress(h, true);
  auto p = through(eg);
  *p.add_resolvers() = tcp_resolver_via(eg).resolvers(0);
  auto w = must_create(h, p);
  // Only a udp Resolver needs UDP ASSOCIATE: a route or a tcp Resolver goes through CONNECT.
  auto u = h.update_egress(eg, 1, socks5("203.0.113.5:1080"));
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? "" : u.error().message));
  CHECK(u->egress().revision() == 2);
  CHECK_FALSE(h.get_egress(eg)->egress().spec().udp_enabled());
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy().revision() == 1);
}

TEST_CASE("CreateWorkspace: when the runtime fails, the Workspace stays stored and status shows the error") {
  Harness h;
  h.runtime.fail_workspace_apply("cannot install nftables table");
  auto w = must_create(h, isolated());
  CHECK(w.network_policy_status().error() == "cannot install nftables table");
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy_status().error() ==
        "cannot install nftables table");
  h.runtime.fail_workspace_apply("");
  auto u = h.update_policy(w.workspace_id(), 1, [] {
    ctrl::NetworkPolicy p;
    p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
    return p;
  }());
  REQUIRE(u.ok());
  CHECK(u->workspace().network_policy_status().error().empty());
}

TEST_CASE("A Workspace the runtime failed to enforce is handed to it again until it is enforced") {
  Harness h;
  h.runtime.fail_workspace_apply("network namespace is gone");
  auto w = must_create(h, isolated());
  const std::string id = w.workspace_id();
  // As at a start after a host reboot: the namespace comes back after the agent.
  h.apply_retry = std::chrono::milliseconds(20);
  h.reopen();
  h.plane->publish_all();
  CHECK(h.get_workspace(id)->workspace().network_policy_status().error() == "network namespace is gone");
  h.runtime.clear();
  h.runtime.fail_workspace_apply("");
  std::string error = status_error_after_retries(h, id);
  CHECK(error.empty());
  CHECK(h.get_workspace(id)->workspace().network_policy_status().applied_revision() == 1);
  auto ev = h.runtime.events();
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.front() == "workspace_applied " + id + " " + kNetns + " r1 drain 0");
  // Enforced: no more calls.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(h.runtime.events().size() == ev.size());
}

TEST_CASE("A failed apply shows its reason in status, not the runtime's 'not attached'") {
  Harness h;
  h.runtime.fail_workspace_apply("nft: No such file or directory");
  auto w = must_create(h, isolated());
  // The runtime (like the data plane) says "workspace is not attached"; the stored
  // reason says why.
  CHECK(h.get_workspace(w.workspace_id())->workspace().network_policy_status().error() ==
        "nft: No such file or directory");
}

TEST_CASE("DeleteWorkspace: the Workspace is not_found afterwards and the runtime removes it") {
  Harness h;
  auto w = must_create(h, isolated());
  h.runtime.clear();
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"workspace_deleted " + w.workspace_id(),
                                 "leftovers_removed " + std::string(kNetns) + " " + identity(kNetns)});
  CHECK(code_of(h.get_workspace(w.workspace_id())) == Code::not_found);
  CHECK(code_of(h.delete_workspace(w.workspace_id())) == Code::not_found);
  CHECK(code_of(h.update_policy(w.workspace_id(), 1, isolated())) == Code::not_found);
  ctrl::UpdateWorkspaceLabelsRequest l;
  l.set_command_id("labels-deleted");
  l.set_workspace_id(w.workspace_id());
  l.set_expected_labels_revision(1);
  (*l.mutable_labels())["team"] = "a";
  CHECK(code_of(h.workspace_labels(l)) == Code::not_found);
  ctrl::UpdateWorkspaceAnnotationsRequest a;
  a.set_command_id("annotations-deleted");
  a.set_workspace_id(w.workspace_id());
  a.set_expected_annotations_revision(1);
  (*a.mutable_annotations())["note"] = "x";
  CHECK(code_of(h.workspace_annotations(a)) == Code::not_found);
  CHECK(code_of(h.get_workspace(w.workspace_id())) == Code::not_found);
}

TEST_CASE("DeleteWorkspace: once the agent's rules are removed from the namespace, nothing is left to redo") {
  Harness h;
  auto w = must_create(h, isolated());
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  CHECK(has_leftovers_call(h.runtime.events()));
  h.restart();
  CHECK_FALSE(has_leftovers_call(h.runtime.events()));
}

TEST_CASE("DeleteWorkspace: rules that could not be removed (or a crash first) are removed at the next start") {
  Harness h;
  auto w = must_create(h, isolated());
  h.runtime.fail_leftovers("nft: Operation not permitted");
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());  // stored: the delete stands
  CHECK(code_of(h.get_workspace(w.workspace_id())) == Code::not_found);
  h.restart();  // still failing: kept for the start after
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"leftovers_removed " + std::string(kNetns) + " " + identity(kNetns)});
  h.runtime.fail_leftovers("");
  h.restart();
  CHECK(has_leftovers_call(h.runtime.events()));
  h.restart();
  CHECK_FALSE(has_leftovers_call(h.runtime.events()));  // done: forgotten
}

TEST_CASE("DeleteWorkspace: rules that could not be removed are retried without a restart") {
  Harness h;
  h.apply_retry = std::chrono::milliseconds(20);
  h.reopen();
  auto w = must_create(h, isolated());
  h.runtime.fail_leftovers("nft: Operation not permitted");
  REQUIRE(h.delete_workspace(w.workspace_id()).ok());
  // Retried while it fails...
  auto calls = [&] {
    auto ev = h.runtime.events();
    return std::count_if(ev.begin(), ev.end(), [](const auto& e) { return e.rfind("leftovers_removed ", 0) == 0; });
  };
  for (int i = 0; i < 200 && calls() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(calls() >= 3);
  // ...until it succeeds, then no more.
  h.runtime.fail_leftovers("");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  h.runtime.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(calls() == 0);
  h.apply_retry = std::chrono::milliseconds(0);
  h.restart();
  CHECK_FALSE(has_leftovers_call(h.runtime.events()));  // the note is gone from the store
}

TEST_CASE("DeleteWorkspace: a namespace a new Workspace holds by the next start keeps its rules") {
  Harness h;
  auto old_ws = must_create(h, isolated());
  h.runtime.fail_leftovers("nft: Operation not permitted");
  REQUIRE(h.delete_workspace(old_ws.workspace_id()).ok());
  h.runtime.fail_leftovers("");
  must_create(h, isolated());  // the same namespace, attached again
  h.restart();
  CHECK_FALSE(has_leftovers_call(h.runtime.events()));
}

TEST_CASE("A Workspace attached again at start records the namespace its path names now") {
  Harness h;
  auto w = must_create(h, isolated());
  const std::string id = w.workspace_id();
  // As after a host reboot: the stored identity is the namespace of before (gone),
  // the path names a new one.
  CHECK(key_text(stored_key(h, id, store::NetnsKey{1, 2})) == "1:2");
  h.restart();
  // The namespace its path names is held now: another path to it is refused.
  CHECK(code_of(h.create_workspace("/proc/thread-self/ns/net", isolated())) == Code::failed_precondition);
  CHECK(key_text(stored_key(h, id)) == identity(kNetns));
}

TEST_CASE("A Workspace whose attach fails keeps its identity until a retry attaches it") {
  Harness h;
  auto w = must_create(h, isolated());
  const std::string id = w.workspace_id();
  stored_key(h, id, store::NetnsKey{1, 2});
  h.runtime.fail_workspace_apply("network namespace is gone");
  h.restart();
  CHECK(key_text(stored_key(h, id)) == "1:2");  // not attached: nothing learned
  h.apply_retry = std::chrono::milliseconds(20);
  h.reopen();
  h.plane->publish_all();
  h.runtime.fail_workspace_apply("");
  std::string error = status_error_after_retries(h, id);
  REQUIRE(error.empty());
  CHECK(key_text(stored_key(h, id)) == identity(kNetns));
}

TEST_CASE("A Workspace whose path names another namespace while the agent runs is attached again") {
  Harness h;
  h.apply_retry = std::chrono::milliseconds(20);
  h.reopen();
  auto w = must_create(h, isolated());
  const std::string id = w.workspace_id();
  stored_key(h, id, store::NetnsKey{1, 2});  // the namespace it held, gone now
  h.runtime.clear();
  h.runtime.set_moved({id});
  std::vector<std::string> ev;
  for (int i = 0; i < 200 && ev.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ev = h.runtime.events();
  }
  // Released (its rules stay in the old namespace), then attached by path, once.
  REQUIRE(ev.size() >= 2);
  CHECK(ev[0] == "workspace_released " + id);
  CHECK(ev[1] == "workspace_applied " + id + " " + kNetns + " r1 drain 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(h.runtime.events().size() == 2);
  CHECK(h.get_workspace(id)->workspace().network_policy_status().applied_revision() == 1);
  CHECK(key_text(stored_key(h, id)) == identity(kNetns));  // the namespace it holds now
}

TEST_CASE("Workspace labels and annotations follow the same CAS rules, never touching the policy revision") {
  Harness h;
  auto w = must_create(h, isolated());
  ctrl::UpdateWorkspaceLabelsRequest l;
  l.set_command_id("wl");
  l.set_workspace_id(w.workspace_id());
  l.set_expected_labels_revision(1);
  (*l.mutable_labels())["team"] = "a";
  auto r = h.workspace_labels(l);
  REQUIRE(r.ok());
  CHECK(r->workspace().labels_revision() == 2);
  CHECK(r->workspace().network_policy().revision() == 1);
  l.set_command_id("wl2");
  CHECK(code_of(h.workspace_labels(l)) == Code::aborted);
  ctrl::UpdateWorkspaceAnnotationsRequest a;
  a.set_command_id("wa");
  a.set_workspace_id(w.workspace_id());
  a.set_expected_annotations_revision(1);
  (*a.mutable_annotations())["note"] = "free text";
  auto ra = h.workspace_annotations(a);
  REQUIRE(ra.ok());
  CHECK(ra->workspace().annotations_revision() == 2);
  ctrl::ListWorkspacesRequest q;
  (*q.mutable_label_selector())["team"] = "a";
  auto list = h.call<ctrl::ListWorkspacesResponse>("kibotos.ctrl.v1.WorkspaceService/ListWorkspaces", q);
  REQUIRE(list.ok());
  REQUIRE(list->workspaces_size() == 1);
  CHECK(list->workspaces(0).network_policy_status().applied_revision() == 1);
}

TEST_CASE(
    "CreateWorkspace: labels and annotations that break the label rules are invalid_argument; nothing is "
    "stored") {
  Harness h;
  auto attempt = [&](const std::function<void(ctrl::CreateWorkspaceRequest&)>& edit) {
    ctrl::CreateWorkspaceRequest r;
    r.set_command_id(h.next_command_id());
    r.set_netns(kNetns);
    *r.mutable_network_policy() = isolated();
    edit(r);
    return h.call<ctrl::CreateWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", r);
  };
  // 'k' + and std::string(1, 'v'): see the GCC -Wrestrict note in egress_rules_test.cpp.
  auto many_labels = [](ctrl::CreateWorkspaceRequest& r, int n) {
    for (int i = 0; i < n; ++i) (*r.mutable_labels())['k' + std::to_string(i)] = std::string(1, 'v');
  };
  // std::string(1, 'v') rather than "v": the GCC -Wrestrict note in egress_rules_test.cpp.
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_labels())["bad key!"] = std::string(1, 'v'); })) ==
        Code::invalid_argument);
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_labels())["team"] = "bad value!"; })) == Code::invalid_argument);
  CHECK(code_of(attempt([&](auto& r) { many_labels(r, 65); })) == Code::invalid_argument);
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_annotations())["bad key!"] = std::string(1, 'x'); })) ==
        Code::invalid_argument);
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_annotations())["big"] = std::string(256 * 1024 - 2, 'x'); })) ==
        Code::invalid_argument);  // 3 + (256 KiB - 2) bytes: one over
  auto none = h.call<ctrl::ListWorkspacesResponse>("kibotos.ctrl.v1.WorkspaceService/ListWorkspaces",
                                                   ctrl::ListWorkspacesRequest());
  REQUIRE(none.ok());
  CHECK(none->workspaces_size() == 0);
  CHECK(h.runtime.events().empty());
  // At the limits the same namespace is accepted: it was never attached.
  auto ok = attempt([&](auto& r) {
    many_labels(r, 64);
    (*r.mutable_annotations())["big"] = std::string(256 * 1024 - 3, 'x');
  });
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->workspace().labels_size() == 64);
  CHECK(ok->workspace().annotations().at("big").size() == 256 * 1024 - 3);
}

TEST_CASE("UpdateWorkspaceLabels: label syntax and the 64-label limit are enforced; a refused write changes nothing") {
  Harness h;
  ctrl::CreateWorkspaceRequest c;
  c.set_command_id("create");
  c.set_netns(kNetns);
  *c.mutable_network_policy() = isolated();
  (*c.mutable_labels())["team"] = "a";
  auto w = h.call<ctrl::CreateWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", c);
  REQUIRE(w.ok());
  const std::string id = w->workspace().workspace_id();
  auto attempt = [&](const std::function<void(ctrl::UpdateWorkspaceLabelsRequest&)>& edit) {
    ctrl::UpdateWorkspaceLabelsRequest r;
    r.set_command_id(h.next_command_id());
    r.set_workspace_id(id);
    r.set_expected_labels_revision(1);
    edit(r);
    return h.workspace_labels(r);
  };
  auto many = [](ctrl::UpdateWorkspaceLabelsRequest& r, int n) {
    for (int i = 0; i < n; ++i) (*r.mutable_labels())['k' + std::to_string(i)] = std::string(1, 'v');
  };
  // std::string(1, 'v') rather than "v": the GCC -Wrestrict note in egress_rules_test.cpp.
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_labels())["-bad"] = std::string(1, 'v'); })) ==
        Code::invalid_argument);
  CHECK(code_of(attempt([](auto& r) { (*r.mutable_labels())["team"] = "b/c"; })) == Code::invalid_argument);
  CHECK(code_of(attempt([&](auto& r) { many(r, 65); })) == Code::invalid_argument);
  auto g = h.get_workspace(id);
  REQUIRE(g.ok());
  CHECK(g->workspace().labels_revision() == 1);
  CHECK(g->workspace().labels_size() == 1);
  CHECK(g->workspace().labels().at("team") == "a");
  auto ok = attempt([&](auto& r) { many(r, 64); });
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->workspace().labels_size() == 64);
  CHECK(ok->workspace().labels_revision() == 2);
}

TEST_CASE(
    "UpdateWorkspaceAnnotations: key syntax and the 256 KiB limit are enforced; a refused write changes "
    "nothing") {
  Harness h;
  ctrl::CreateWorkspaceRequest c;
  c.set_command_id("create");
  c.set_netns(kNetns);
  *c.mutable_network_policy() = isolated();
  (*c.mutable_annotations())["note"] = "first";
  auto w = h.call<ctrl::CreateWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", c);
  REQUIRE(w.ok());
  const std::string id = w->workspace().workspace_id();
  auto attempt = [&](const std::string& key, const std::string& value) {
    ctrl::UpdateWorkspaceAnnotationsRequest r;
    r.set_command_id(h.next_command_id());
    r.set_workspace_id(id);
    r.set_expected_annotations_revision(1);
    (*r.mutable_annotations())[key] = value;
    return h.workspace_annotations(r);
  };
  CHECK(code_of(attempt("bad key!", "x")) == Code::invalid_argument);
  CHECK(code_of(attempt("big", std::string(256 * 1024 - 2, 'x'))) == Code::invalid_argument);  // one over
  auto g = h.get_workspace(id);
  REQUIRE(g.ok());
  CHECK(g->workspace().annotations_revision() == 1);
  CHECK(g->workspace().annotations_size() == 1);
  CHECK(g->workspace().annotations().at("note") == "first");
  auto ok = attempt("big", std::string(256 * 1024 - 3, 'x'));  // exactly the limit
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->workspace().annotations_revision() == 2);
}

TEST_CASE(
    "UpdateWorkspaceAnnotations: CAS on annotations_revision, equal content keeps it, the policy revision never "
    "moves") {
  Harness h;
  ctrl::CreateWorkspaceRequest c;
  c.set_command_id("create");
  c.set_netns(kNetns);
  *c.mutable_network_policy() = isolated();
  (*c.mutable_annotations())["note"] = "a";
  auto w = h.call<ctrl::CreateWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", c);
  REQUIRE(w.ok());
  const std::string id = w->workspace().workspace_id();
  auto send = [&](uint64_t expected, const std::string& note) {
    ctrl::UpdateWorkspaceAnnotationsRequest r;
    r.set_command_id(h.next_command_id());
    r.set_workspace_id(id);
    r.set_expected_annotations_revision(expected);
    (*r.mutable_annotations())["note"] = note;
    return h.workspace_annotations(r);
  };
  auto stored = [&] {
    auto g = h.get_workspace(id);
    REQUIRE(g.ok());
    return g->workspace();
  };
  // A mismatch is aborted and changes nothing.
  CHECK(code_of(send(2, "b")) == Code::aborted);
  CHECK(stored().annotations().at("note") == "a");
  CHECK(stored().annotations_revision() == 1);
  // Equal content is idempotent and keeps annotations_revision.
  auto same = send(1, "a");
  REQUIRE(same.ok());
  CHECK(same->workspace().annotations_revision() == 1);
  CHECK(same->workspace().network_policy().revision() == 1);
  CHECK(stored().annotations_revision() == 1);
  // A change moves annotations_revision only.
  auto changed = send(1, "b");
  REQUIRE(changed.ok());
  CHECK(changed->workspace().annotations_revision() == 2);
  CHECK(changed->workspace().network_policy().revision() == 1);
  CHECK(changed->workspace().labels_revision() == 1);
  CHECK(stored().annotations().at("note") == "b");
  CHECK(stored().annotations_revision() == 2);
  CHECK(stored().network_policy().revision() == 1);
}

TEST_CASE("publish_all: every Egress, then every Workspace, as stored") {
  Harness h;
  std::string a = egress(h), b = egress(h);
  auto w = must_create(h, through(b));
  REQUIRE(h.update_egress(b, 1, socks5("203.0.113.9:1080")).ok());
  h.restart();
  CHECK(h.runtime.events() == std::vector<std::string>{
                                  "egress_published " + a + " r1 drain 0",
                                  "egress_published " + b + " r2 drain 0",
                                  "workspace_applied " + w.workspace_id() + " " + kNetns + " r1 drain 0",
                              });
}

TEST_CASE("GetAgent: version, features, uptime and counts from the store and the runtime") {
  Harness h;
  egress(h);
  std::string gone = egress(h);
  REQUIRE(h.delete_egress(gone).ok());
  must_create(h, isolated());
  auto r = h.call<ctrl::GetAgentResponse>("kibotos.ctrl.v1.AgentService/GetAgent", ctrl::GetAgentRequest());
  REQUIRE(r.ok());
  CHECK(r->agent().version() == KIBOTOS_VERSION);
  CHECK(r->agent().features_size() > 0);
  CHECK(r->agent().egress_count() == 1);
  CHECK(r->agent().workspace_count() == 1);
  CHECK(r->agent().active_connections() == 7);
  CHECK(r->agent().draining_connections() == 3);
  CHECK(r->agent().uptime().seconds() >= 0);
  // The process started before this call, and not before this test program did.
  using std::chrono::system_clock;
  const int64_t started = r->agent().process_start_time().seconds();
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(system_clock::now().time_since_epoch()).count();
  CHECK(started > 1'700'000'000);
  CHECK(started <= now);
  CHECK(started >= now - 3600);
}

TEST_CASE("UpdateNetworkPolicy: expected_revision is required; drain_seconds 0 to 3600, absent 600") {
  Harness h;
  std::string eg = egress(h);
  auto w = must_create(h, isolated());
  CHECK(code_of(h.update_policy(w.workspace_id(), 0, through(eg))) == Code::invalid_argument);
  ctrl::UpdateNetworkPolicyRequest r;
  r.set_command_id("drain-too-long");
  r.set_workspace_id(w.workspace_id());
  r.set_expected_revision(1);
  *r.mutable_network_policy() = through(eg);
  r.set_drain_seconds(3601);
  auto path = "kibotos.ctrl.v1.WorkspaceService/UpdateNetworkPolicy";
  CHECK(code_of(h.call<ctrl::UpdateNetworkPolicyResponse>(path, r)) == Code::invalid_argument);
  h.runtime.clear();
  r.set_command_id("drain-ok");
  r.set_drain_seconds(0);
  REQUIRE(h.call<ctrl::UpdateNetworkPolicyResponse>(path, r).ok());
  CHECK(h.runtime.events() ==
        std::vector<std::string>{"workspace_applied " + w.workspace_id() + " " + kNetns + " r2 drain 0"});
}

TEST_CASE("CreateWorkspace: a retry with the same command ID returns the first Workspace, not a second one") {
  Harness h;
  ctrl::CreateWorkspaceRequest r;
  r.set_command_id("ws-once");
  r.set_netns(kNetns);
  *r.mutable_network_policy() = isolated();
  auto path = "kibotos.ctrl.v1.WorkspaceService/CreateWorkspace";
  auto first = h.call<ctrl::CreateWorkspaceResponse>(path, r);
  REQUIRE(first.ok());
  h.reopen();
  h.runtime.clear();
  auto again = h.call<ctrl::CreateWorkspaceResponse>(path, r);
  REQUIRE(again.ok());
  CHECK(again->workspace().workspace_id() == first->workspace().workspace_id());
  CHECK(h.runtime.events().empty());
}
