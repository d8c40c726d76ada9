// A test driver for the DNS forwarder, not installed: the real netns attachment
// (TPROXY for the guest's DNS) and kib::dns::DnsService, commanded line by line on
// stdin (what the data-plane runtime would call).
//
//   egress ID REV DRAIN HOST:PORT [user=U] [pass=P] [tls] [sni=NAME] [ca=PATH]
//   delete-egress ID
//   workspace ID NETNS_PATH POLICY_REV RESOLVER...   RESOLVER = udp|tcp:ADDR[@EGRESS_ID]
//   delete-workspace ID
//   status ID            -> one line (describe_dns_status)
//   counters ID          -> "queries Q answers A timeouts T failovers F inflight N"
// Every command answers one line: "ok", "error: ...", or its output.
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/dataplane/netns_attacher.h"
#include "agent/dns/dns_service.h"
#include "agent/policy/name_resolver.h"
#include "agent/relay/dial_target.h"
#include "netns/namespace_handle.h"
#include "tests/integration/stdin_harness.h"

namespace {

using namespace kib;

std::string egress_cmd(dns::DnsService& svc, std::istringstream& in) {
  auto rev = std::make_shared<EgressRevision>();
  uint32_t drain = 0;
  if (std::string err = harness::parse_egress(in, *rev, drain); !err.empty()) return err;
  rev->spec.set_udp_enabled(true);
  auto target = relay::make_dial_target(rev);
  if (!target.ok()) return "error: " + target.error().message;
  svc.publish_egress(*target, drain);
  return "ok";
}

struct Attached {};

std::string workspace_cmd(dns::DnsService& svc, dataplane::NetnsAttacher& attacher,
                          std::map<std::string, Attached>& attached, std::istringstream& in) {
  std::string id, path;
  uint64_t prev = 0;
  in >> id >> path >> prev;
  ctrl::NetworkPolicy p;
  p.set_revision(prev);
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  std::string spec;
  while (in >> spec) {
    auto colon = spec.find(':');
    if (colon == std::string::npos) return "error: bad resolver " + spec;
    auto* r = p.add_resolvers();
    std::string addr = spec.substr(colon + 1);
    if (auto at = addr.rfind('@'); at != std::string::npos) {
      r->set_egress_id(addr.substr(at + 1));
      addr = addr.substr(0, at);
    }
    if (spec.substr(0, colon) == "tcp")
      r->mutable_tcp()->set_address(addr);
    else
      r->mutable_udp()->set_address(addr);
  }
  dns::DnsListeners listeners;
  if (attached.count(id) == 0) {
    auto ls = attacher.attach(id, path, p, 1);
    if (!ls.ok()) return "error: attach: " + ls.error().message;
    listeners = dns::DnsListeners{std::move(ls->dns_udp), std::move(ls->dns_tcp)};
    attached[id];
  } else {
    if (auto st = attacher.update(id, p); !st.ok()) return "error: " + st.error().message;
  }
  // The calls the data-plane runtime makes (see agent/dns/dns_service.h).
  Status st = svc.apply_workspace_at(id, path, p, std::move(listeners));
  return st.ok() ? "ok" : "error: " + st.error().message;
}

std::string counters_cmd(dns::DnsService& svc, std::istringstream& in) {
  std::string id;
  in >> id;
  auto s = svc.status(id);
  if (!s) return "error: no such workspace";
  const auto& c = s->counters;
  return "queries " + std::to_string(c.queries) + " answers " + std::to_string(c.answers) + " timeouts " +
         std::to_string(c.timeouts) + " failovers " + std::to_string(c.failovers) + " inflight " +
         std::to_string(s->in_flight);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> allowed;
  dns::DnsServiceOptions opts;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--allow")
      allowed.push_back(v);
    else if (k == "--attempt-timeout-ms")
      opts.workspace.attempt_timeout = std::chrono::milliseconds(std::stoul(v));
    else if (k == "--max-in-flight")
      opts.workspace.max_in_flight = std::stoul(v);
    else if (k == "--channel-idle-ms")
      opts.workspace.channel_idle_ms = std::stoul(v);
    else if (k == "--guest-tcp-idle-ms")
      opts.workspace.guest_tcp_idle_ms = std::stoul(v);
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  auto addr_policy = policy::EndpointAddressPolicy::from_strings(allowed);
  if (!addr_policy.ok()) {
    std::cout << "error: " << addr_policy.error().message << std::endl;
    return 1;
  }
  auto svc = dns::DnsService::start(opts, *addr_policy, {});
  if (!svc.ok()) {
    std::cout << "error: " << svc.error().message << std::endl;
    return 1;
  }
  dataplane::NetnsAttacher attacher;
  std::map<std::string, Attached> attached;
  harness::run_commands({
      {"egress", [&](auto& in) { return egress_cmd(**svc, in); }},
      {"delete-egress", harness::with_id([&](const std::string& id) { (*svc)->delete_egress(id); })},
      {"workspace", [&](auto& in) { return workspace_cmd(**svc, attacher, attached, in); }},
      {"delete-workspace", harness::with_id([&](const std::string& id) {
         (*svc)->remove_workspace(id);
         attacher.detach(id);
         attached.erase(id);
       })},
      {"status",
       [&](auto& in) {
    std::string id;
    in >> id;
    auto s = (*svc)->status(id);
    return s ? dns::describe_dns_status(*s) : std::string("error: no such workspace");
       }},
      {"counters", [&](auto& in) { return counters_cmd(**svc, in); }},
  });
  svc->reset();
  for (auto& [id, a] : attached) attacher.detach(id);
  return 0;
}
