#include "agent/api/services/agent_service.h"

#ifndef KIBOTOS_VERSION
#define KIBOTOS_VERSION "unknown"
#endif

namespace kib::api {
namespace {

namespace ctrl = ::kibotos::ctrl::v1;

// What this build can do, for operators and tools checking compatibility.
const char* const kFeatures[] = {
    "connect.http1",
    "connect.http2",
    "connect.json",
    "connect.proto",
    // The other protocols served on the same paths, as connect-go serves them.
    "connect.stream",
    "grpc.http2",
    "grpc.json",
    "grpc.proto",
    "grpc_web.http1",
    "grpc_web.http2",
    "grpc.reflection.v1",
    "grpc.reflection.v1alpha",
    "grpc.health.v1",
    "compression.gzip",
    "egress.socks5",
    "egress.socks5.auth",
    "egress.tls",
    "egress.udp",
    "workspace.tproxy",
    "workspace.dns",
};

// Taken when the program is loaded: the process's start, to the operator.
const std::chrono::system_clock::time_point kProcessStart = std::chrono::system_clock::now();

}  // namespace

Result<AgentTotals> AgentService::totals() {
  AgentTotals t;
  t.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  KIB_TRY(env_.store.read([&](store::Transaction& txn) -> Status {
    KIB_TRY_ASSIGN(auto w, txn.count(store::Kind::workspace));
    KIB_TRY_ASSIGN(auto e, txn.count(store::Kind::egress));
    t.workspaces = w;
    t.egresses = e;
    return {};
  }));
  t.connections = env_.runtime.counts();
  return t;
}

Result<ctrl::GetAgentResponse> AgentService::get(const ctrl::GetAgentRequest&) {
  KIB_TRY_ASSIGN(auto t, totals());
  ctrl::GetAgentResponse resp;
  ctrl::Agent* a = resp.mutable_agent();
  a->set_version(KIBOTOS_VERSION);
  auto ns = static_cast<int64_t>(t.uptime_seconds * 1e9);
  a->mutable_uptime()->set_seconds(ns / 1000000000);
  a->mutable_uptime()->set_nanos(static_cast<int32_t>(ns % 1000000000));
  const auto since_epoch =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kProcessStart.time_since_epoch()).count();
  a->mutable_process_start_time()->set_seconds(since_epoch / 1000000000);
  a->mutable_process_start_time()->set_nanos(static_cast<int32_t>(since_epoch % 1000000000));
  for (const char* f : kFeatures) a->add_features(f);
  a->set_workspace_count(t.workspaces);
  a->set_egress_count(t.egresses);
  a->set_active_connections(t.connections.active_connections);
  a->set_draining_connections(t.connections.draining_connections);
  a->set_inherited_connections(t.connections.inherited_connections);
  return resp;
}

Result<std::string> AgentService::metrics_text() {
  KIB_TRY_ASSIGN(auto t, totals());
  return prometheus_text(t, env_.runtime.metrics(), env_.runtime.egress_timings());
}

void AgentService::register_methods(MethodRegistry& reg) {
  reg.add<ctrl::GetAgentRequest, ctrl::GetAgentResponse>("kibotos.ctrl.v1.AgentService/GetAgent",
                                                         [this](const auto& r, const CallContext&) { return get(r); });
}

}  // namespace kib::api
