#pragma once
// AgentService.GetAgent: version, build features, uptime, counts.
#include <chrono>

#include "agent/api/connect/method_registry.h"
#include "agent/api/services/metrics_text.h"
#include "agent/api/services/service_env.h"
#include "kibotos/ctrl/v1/agent.pb.h"

namespace kib::api {

class AgentService {
 public:
  explicit AgentService(ServiceEnv& env) : env_(env), started_(std::chrono::steady_clock::now()) {}

  Result<::kibotos::ctrl::v1::GetAgentResponse> get(const ::kibotos::ctrl::v1::GetAgentRequest& req);
  // The Prometheus text of GET /metrics: the same counts, and the data plane's counters.
  Result<std::string> metrics_text();
  void register_methods(MethodRegistry& registry);

 private:
  Result<AgentTotals> totals();

  ServiceEnv& env_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace kib::api
