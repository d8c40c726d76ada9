#pragma once
// EgressService: the seven RPCs of the reference, on the store, with the runtime told
// of every committed change.
#include "agent/api/connect/method_registry.h"
#include "agent/api/services/service_env.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace kib::api {

class EgressService {
 public:
  explicit EgressService(ServiceEnv& env) : env_(env) {}

  Result<ctrl::CreateEgressResponse> create(const ctrl::CreateEgressRequest& req);
  Result<ctrl::GetEgressResponse> get(const ctrl::GetEgressRequest& req);
  Result<ctrl::ListEgressesResponse> list(const ctrl::ListEgressesRequest& req);
  Result<ctrl::UpdateEgressResponse> update(const ctrl::UpdateEgressRequest& req);
  Result<ctrl::DeleteEgressResponse> remove(const ctrl::DeleteEgressRequest& req);
  Result<ctrl::UpdateEgressLabelsResponse> update_labels(const ctrl::UpdateEgressLabelsRequest& req);
  Result<ctrl::UpdateEgressAnnotationsResponse> update_annotations(const ctrl::UpdateEgressAnnotationsRequest& req);

  // Publishes every stored Egress (at start).
  Status publish_all();
  void register_methods(MethodRegistry& registry);

 private:
  void publish(const ctrl::Egress& e, uint32_t drain_seconds);
  Status validate_spec(const ctrl::EgressSpec& spec) const;

  ServiceEnv& env_;
};

}  // namespace kib::api
