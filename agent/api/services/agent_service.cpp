#include "agent/api/services/agent_service.h"

#ifndef KIBOTOS_VERSION
#define KIBOTOS_VERSION "unknown"
#endif

namespace kib::api {
namespace {

namespace ctrl = ::kibotos::ctrl::v1;

// What this build can do, for operators and tools checking compatibility.
const char* const kFeatures[] = {
    "connect.http1", "connect.http2", "connect.json", "connect.proto",
    "egress.socks5", "egress.socks5.auth", "egress.tls", "egress.udp",
    "workspace.tproxy", "workspace.dns",
};

}  // namespace

Result<ctrl::GetAgentResponse> AgentService::get(const ctrl::GetAgentRequest&) {
  ctrl::GetAgentResponse resp;
  ctrl::Agent* a = resp.mutable_agent();
  a->set_version(KIBOTOS_VERSION);
  auto up = std::chrono::steady_clock::now() - started_;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(up).count();
  a->mutable_uptime()->set_seconds(ns / 1000000000);
  a->mutable_uptime()->set_nanos(static_cast<int32_t>(ns % 1000000000));
  for (const char* f : kFeatures) a->add_features(f);
  KIB_TRY(env_.store.read([&](store::Transaction& txn) -> Status {
    auto w = txn.count(store::Kind::workspace);
    if (!w.ok()) return std::move(w).error();
    auto e = txn.count(store::Kind::egress);
    if (!e.ok()) return std::move(e).error();
    a->set_workspace_count(*w);
    a->set_egress_count(*e);
    return {};
  }));
  RuntimeCounts c = env_.runtime.counts();
  a->set_active_connections(c.active_connections);
  a->set_draining_connections(c.draining_connections);
  return resp;
}

void AgentService::register_methods(MethodRegistry& reg) {
  reg.add<ctrl::GetAgentRequest, ctrl::GetAgentResponse>(
      "kibotos.ctrl.v1.AgentService/GetAgent", [this](const auto& r, const CallContext&) { return get(r); });
}

}  // namespace kib::api
