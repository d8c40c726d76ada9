// A test driver for the data plane, not installed: the real DataplaneRuntime and
// netns attachment, commanded line by line on stdin (what the store would call).
//
//   egress ID REV DRAIN HOST:PORT [user=U] [pass=P] [tls] [sni=NAME] [ca=PATH]
//   delete-egress ID
//   workspace ID NETNS_PATH DRAIN POLICY_REV EGRESS_ID=CIDR[,CIDR...][@FIRST-LAST] ...
//   delete-workspace ID
//   status ID          -> one JSON line (NetworkPolicyStatus)
//   counts             -> "active N draining M"
// Every command answers one line: "ok", "error: ...", or its output.
#include <google/protobuf/util/json_util.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/config/config.h"
#include "agent/dataplane/dataplane_runtime.h"
#include "agent/dataplane/netns_attacher.h"
#include "tests/integration/stdin_harness.h"

namespace {

using namespace kib;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  return out;
}

std::string egress_cmd(Runtime& rt, std::istringstream& in) {
  auto rev = std::make_shared<EgressRevision>();
  uint32_t drain = 0;
  if (std::string err = harness::parse_egress(in, *rev, drain); !err.empty()) return err;
  rt.egress_published(rev, drain);
  return "ok";
}

std::string workspace_cmd(Runtime& rt, std::istringstream& in) {
  std::string id, path;
  uint32_t drain = 0;
  uint64_t prev = 0;
  in >> id >> path >> drain >> prev;
  ctrl::NetworkPolicy p;
  p.set_revision(prev);
  p.set_mode(ctrl::NETWORK_MODE_PUBLIC_INTERNET);
  std::string route;
  while (in >> route) {
    auto eq = route.find('=');
    if (eq == std::string::npos) return "error: bad route " + route;
    auto* r = p.add_egresses();
    r->set_egress_id(route.substr(0, eq));
    std::string rest = route.substr(eq + 1);
    auto at = rest.find('@');
    if (at != std::string::npos) {
      auto ports = split(rest.substr(at + 1), '-');
      auto* pr = r->add_ports();
      pr->set_first(static_cast<uint32_t>(std::stoul(ports[0])));
      pr->set_last(static_cast<uint32_t>(std::stoul(ports.size() > 1 ? ports[1] : ports[0])));
      rest = rest.substr(0, at);
    }
    for (auto& c : split(rest, ',')) r->add_destinations(c);
  }
  Status st = rt.workspace_applied(id, path, p, drain);
  return st.ok() ? "ok" : "error: " + st.error().message;
}

std::string status_cmd(Runtime& rt, std::istringstream& in) {
  std::string id;
  in >> id;
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(rt.workspace_status(id), &json, o);
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries the command protocol; the data plane's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("relay_harness"));
  Config cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--allow")
      cfg.egress.allowed_special_purpose_cidrs.push_back(v);
    else if (k == "--threads")
      cfg.dataplane.threads = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--workspace-loops")
      cfg.dataplane.workspace_loops = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--resolver")
      cfg.egress.resolvers.push_back(v);
    else if (k == "--idle")
      cfg.dataplane.idle_timeout = std::chrono::seconds(std::stoul(v));
    else if (k == "--handshake-timeout")
      cfg.dataplane.handshake_timeout = std::chrono::seconds(std::stoul(v));
    else if (k == "--max-connections")
      cfg.dataplane.max_connections = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--direct-descriptors")
      cfg.dataplane.direct_descriptors = v == "true";
    else if (k == "--splice-coalesce-us")
      cfg.dataplane.splice_coalesce_us = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--max-per-workspace")
      cfg.dataplane.max_connections_per_workspace = static_cast<uint32_t>(std::stoul(v));
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  dataplane::NetnsAttacher attacher(cfg.dataplane.guest_congestion_control);
  auto rt = dataplane::DataplaneRuntime::create(cfg, attacher);
  if (!rt.ok()) {
    std::cout << "error: " << rt.error().message << std::endl;
    return 1;
  }
  Runtime& runtime = **rt;
  harness::run_commands({
      {"egress", [&](auto& in) { return egress_cmd(runtime, in); }},
      {"delete-egress", harness::with_id([&](const std::string& id) { runtime.egress_deleted(id); })},
      {"workspace", [&](auto& in) { return workspace_cmd(runtime, in); }},
      {"delete-workspace", harness::with_id([&](const std::string& id) { runtime.workspace_deleted(id); })},
      {"status", [&](auto& in) { return status_cmd(runtime, in); }},
      {"counts",
       [&](auto&) {
    auto c = runtime.counts();
    return "active " + std::to_string(c.active_connections) + " draining " + std::to_string(c.draining_connections);
       }},
  });
  rt->reset();
  return 0;
}
