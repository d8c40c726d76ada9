#include "agent/api/reflection/health_check.h"

#include <algorithm>
#include <optional>

namespace kib::api {

namespace health = grpc::health::v1;
using Serving = health::HealthCheckResponse::ServingStatus;

constexpr const char* kHealth = "grpc.health.v1.Health";

namespace {

// Sends the status when it differs from the last one sent: the first poll always, then
// once per change (a wake whose change was undone sends nothing).
class HealthWatch final : public ServerStream {
 public:
  HealthWatch(const Readiness& readiness, bool known, std::unique_ptr<Readiness::Subscription> subscription)
      : readiness_(readiness), known_(known), subscription_(std::move(subscription)) {}

  Result<std::vector<MessagePtr>> poll() override {
    const Serving now = !known_              ? health::HealthCheckResponse::SERVICE_UNKNOWN
                        : readiness_.ready() ? health::HealthCheckResponse::SERVING
                                             : health::HealthCheckResponse::NOT_SERVING;
    std::vector<MessagePtr> out;
    if (sent_ == now) return out;
    sent_ = now;
    auto r = std::make_unique<health::HealthCheckResponse>();
    r->set_status(now);
    out.push_back(std::move(r));
    return out;
  }

 private:
  const Readiness& readiness_;
  const bool known_;
  std::unique_ptr<Readiness::Subscription> subscription_;  // none for an unknown service
  std::optional<Serving> sent_;
};

}  // namespace

bool HealthCheck::known(const std::string& service) const {
  return service.empty() || std::find(services_.begin(), services_.end(), service) != services_.end();
}

Result<health::HealthCheckResponse> HealthCheck::check(const health::HealthCheckRequest& req) const {
  if (!known(req.service())) return Error{Code::not_found, "unknown service " + req.service()};
  health::HealthCheckResponse r;
  r.set_status(readiness_.ready() ? health::HealthCheckResponse::SERVING : health::HealthCheckResponse::NOT_SERVING);
  return r;
}

Result<std::unique_ptr<ServerStream>> HealthCheck::watch(const health::HealthCheckRequest& req,
                                                         const CallContext& ctx) {
  if (!ctx.waker)
    return Error{Code::unimplemented, "Health/Watch needs HTTP/2, where its stream stays open (Check works here)"};
  const bool is_known = known(req.service());
  std::unique_ptr<Readiness::Subscription> subscription;
  if (is_known) {
    // Subscribed before the first poll reads the status: no change falls between.
    KIB_TRY_ASSIGN(auto s, readiness_.watch(ctx.waker));
    subscription = std::move(s);
  }
  return std::unique_ptr<ServerStream>(new HealthWatch(readiness_, is_known, std::move(subscription)));
}

void HealthCheck::register_methods(MethodRegistry& registry) {
  services_.push_back(kHealth);
  registry.add<health::HealthCheckRequest, health::HealthCheckResponse>(
      std::string(kHealth) + "/Check",
      [this](const health::HealthCheckRequest& req, const CallContext&) { return check(req); });
  registry.add_server_stream<health::HealthCheckRequest>(
      std::string(kHealth) + "/Watch",
      [this](const health::HealthCheckRequest& req, const CallContext& ctx) { return watch(req, ctx); });
}

}  // namespace kib::api
