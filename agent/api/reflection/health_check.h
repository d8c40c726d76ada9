#pragma once
// grpc.health.v1.Health/Check: SERVING while the agent is ready (what its systemd
// notification says: READY=1 sent, STOPPING=1 not yet), NOT_SERVING otherwise. ""
// asks about the agent; a served service's full name about that service; another
// name is NOT_FOUND, as the health checking protocol says.
#include <atomic>
#include <string>
#include <vector>

#include "agent/api/connect/method_registry.h"
#include "grpc/health/v1/health.pb.h"

namespace kib::api {

class HealthCheck {
 public:
  // `ready` is written by the daemon and must outlive this object.
  HealthCheck(const std::atomic<bool>& ready, std::vector<std::string> services)
      : ready_(ready), services_(std::move(services)) {}

  Result<grpc::health::v1::HealthCheckResponse> check(const grpc::health::v1::HealthCheckRequest& request) const;

  // Registers Health/Check; this object must outlive the registry's use.
  void register_methods(MethodRegistry& registry);

 private:
  const std::atomic<bool>& ready_;
  std::vector<std::string> services_;
};

}  // namespace kib::api
