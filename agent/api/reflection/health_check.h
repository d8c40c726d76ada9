#pragma once
// grpc.health.v1.Health: SERVING while the agent is ready (what its systemd
// notification says: READY=1 sent, STOPPING=1 not yet), NOT_SERVING otherwise. ""
// asks about the agent; a served service's full name about that service. Check of
// another name is NOT_FOUND; Watch of one answers SERVICE_UNKNOWN and stays open, as
// the health checking protocol says. Watch sends the status at once and again each
// time it changes, over HTTP/2 (its stream stays open); it ends when the client
// cancels, the connection ends, or the agent stops (unavailable).
#include <memory>
#include <string>
#include <vector>

#include "agent/api/connect/method_registry.h"
#include "agent/api/reflection/readiness.h"
#include "grpc/health/v1/health.pb.h"

namespace kib::api {

class HealthCheck {
 public:
  // `readiness` is set by the daemon and must outlive this object and every Watch.
  HealthCheck(Readiness& readiness, std::vector<std::string> services)
      : readiness_(readiness), services_(std::move(services)) {}

  Result<grpc::health::v1::HealthCheckResponse> check(const grpc::health::v1::HealthCheckRequest& request) const;
  // A Watch stream's source; `ctx.waker` is woken when readiness changes (none: the
  // transport cannot hold the stream open, unimplemented).
  Result<std::unique_ptr<ServerStream>> watch(const grpc::health::v1::HealthCheckRequest& request,
                                              const CallContext& ctx);

  // Registers Health/Check and Health/Watch; this object must outlive the registry's use.
  void register_methods(MethodRegistry& registry);

 private:
  bool known(const std::string& service) const;

  Readiness& readiness_;
  std::vector<std::string> services_;
};

}  // namespace kib::api
