#include "agent/api/reflection/health_check.h"

#include <algorithm>

namespace kib::api {

namespace health = grpc::health::v1;

constexpr const char* kHealth = "grpc.health.v1.Health";

Result<health::HealthCheckResponse> HealthCheck::check(const health::HealthCheckRequest& req) const {
  const auto& name = req.service();
  if (!name.empty() && std::find(services_.begin(), services_.end(), name) == services_.end())
    return Error{Code::not_found, "unknown service " + name};
  health::HealthCheckResponse r;
  r.set_status(ready_.load() ? health::HealthCheckResponse::SERVING : health::HealthCheckResponse::NOT_SERVING);
  return r;
}

void HealthCheck::register_methods(MethodRegistry& registry) {
  services_.push_back(kHealth);
  registry.add<health::HealthCheckRequest, health::HealthCheckResponse>(
      std::string(kHealth) + "/Check",
      [this](const health::HealthCheckRequest& req, const CallContext&) { return check(req); });
}

}  // namespace kib::api
