#include "agent/api/services/egress_service.h"

#include <memory>

#include "agent/api/conventions/proto_bytes.h"
#include "agent/api/conventions/quoted.h"
#include "agent/api/services/egress_spec_validation.h"
#include "agent/api/services/list_page.h"
#include "agent/api/services/metadata_update.h"
#include "agent/api/services/stored_resources.h"

namespace kib::api {
namespace {

constexpr const char* kService = "kibotos.ctrl.v1.EgressService/";

using Egress = ctrl::Egress;

}  // namespace

Status EgressService::validate_spec(const ctrl::EgressSpec& spec) const {
  return validate_egress_spec(spec, env_.address_policy, env_.resolve);
}

void EgressService::publish(const ctrl::Egress& e, uint32_t drain_seconds) {
  auto rev = std::make_shared<EgressRevision>();
  rev->egress_id = e.egress_id();
  rev->revision = e.revision();
  rev->spec = e.spec();  // password included: the data plane authenticates with it
  env_.runtime.egress_published(std::move(rev), drain_seconds);
}

Result<ctrl::CreateEgressResponse> EgressService::create(const ctrl::CreateEgressRequest& req) {
  using Resp = ctrl::CreateEgressResponse;
  ctrl::Egress created;
  auto precheck = [&]() -> Status {
    KIB_TRY(validate_labels(req.labels()));
    KIB_TRY(validate_annotations(req.annotations()));
    return validate_spec(req.spec());
  };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY_ASSIGN(const uint64_t stored, txn.count(store::Kind::egress));
    if (stored >= env_.config.egress.max_egresses)
      return Error{Code::resource_exhausted, "the agent holds " + std::to_string(stored) +
                                                 " Egresses, its limit (egress.max_egresses); delete one first"};
    auto now = to_timestamp(env_.clock());
    ctrl::Egress e;
    e.set_egress_id(store::random_id("eg-"));
    *e.mutable_spec() = req.spec();
    e.set_revision(1);  // "CreateEgress stores a new Egress at revision 1"
    *e.mutable_created_at() = now;
    *e.mutable_updated_at() = now;
    *e.mutable_labels() = req.labels();
    *e.mutable_annotations() = req.annotations();
    e.set_labels_revision(1);
    e.set_annotations_revision(1);
    KIB_TRY(txn.insert(store::Kind::egress, e.egress_id(), e.SerializeAsString()));
    created = e;
    Resp resp;
    *resp.mutable_egress() = without_password(e);
    return resp;
  };
  return env_.commands.run<Resp>(kService + std::string("CreateEgress"), req, req.command_id(), precheck, apply,
                                 [&] { publish(created, 0); });
}

Result<ctrl::GetEgressResponse> EgressService::get(const ctrl::GetEgressRequest& req) {
  KIB_TRY(require_id<Egress>(req.egress_id()));
  ctrl::GetEgressResponse resp;
  KIB_TRY(env_.store.read([&](store::Transaction& txn) -> Status {
    KIB_TRY_ASSIGN(auto e, must_load<Egress>(txn, req.egress_id()));
    *resp.mutable_egress() = without_password(std::move(e));
    return {};
  }));
  return resp;
}

Result<ctrl::ListEgressesResponse> EgressService::list(const ctrl::ListEgressesRequest& req) {
  ctrl::ListEgressesResponse resp;
  ListQuery q{store::Kind::egress, "egress", req.page_size(), req.page_token(), &req.label_selector()};
  auto next = list_page(env_.store, q, [&](const store::ResourceRow& row, bool append) -> Result<bool> {
    KIB_TRY_ASSIGN(auto e, decode_stored<Egress>(row));
    if (!selector_matches(req.label_selector(), e.labels())) return false;
    if (append) *resp.add_egresses() = without_password(std::move(e));
    return true;
  });
  if (!next.ok()) return std::move(next).error();
  resp.set_next_page_token(*next);
  return resp;
}

Result<ctrl::UpdateEgressResponse> EgressService::update(const ctrl::UpdateEgressRequest& req) {
  using Resp = ctrl::UpdateEgressResponse;
  uint32_t drain = 0;
  ctrl::Egress changed;
  auto precheck = [&]() -> Status {
    KIB_TRY(require_id<Egress>(req.egress_id()));
    KIB_TRY(require_expected(req.expected_revision(), "expected_revision"));
    KIB_TRY_ASSIGN(auto d, drain_seconds_of(req));
    drain = d;
    return validate_spec(req.spec());
  };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY_ASSIGN(Egress e, must_load<Egress>(txn, req.egress_id()));
    if (e.revision() != req.expected_revision())
      return Error{Code::aborted, "expected_revision " + std::to_string(req.expected_revision()) +
                                      " does not match the current revision " + std::to_string(e.revision())};
    Resp resp;
    // "Equal content is idempotent and keeps the revision" (and updated_at).
    if (!same_content(e.spec(), req.spec())) {
      if (e.spec().udp_enabled() && !req.spec().udp_enabled()) {
        KIB_TRY_ASSIGN(auto used, txn.egress_referenced(e.egress_id(), /*udp_only=*/true));
        if (used)
          return Error{Code::failed_precondition,
                       "udp_enabled cannot be turned off: a udp Resolver of a Workspace policy goes through "
                       "this Egress"};
      }
      *e.mutable_spec() = req.spec();
      e.set_revision(e.revision() + 1);
      *e.mutable_updated_at() = next_updated_at(e.updated_at(), env_.clock());
      KIB_TRY(save(txn, e));
      changed = e;
    }
    *resp.mutable_egress() = without_password(std::move(e));
    return resp;
  };
  return env_.commands.run<Resp>(kService + std::string("UpdateEgress"), req, req.command_id(), precheck, apply, [&] {
    if (!changed.egress_id().empty()) publish(changed, drain);
  });
}

Result<ctrl::DeleteEgressResponse> EgressService::remove(const ctrl::DeleteEgressRequest& req) {
  using Resp = ctrl::DeleteEgressResponse;
  auto precheck = [&]() -> Status { return require_id<Egress>(req.egress_id()); };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY(must_load<Egress>(txn, req.egress_id()));
    KIB_TRY_ASSIGN(auto used, txn.egress_referenced(req.egress_id(), /*udp_only=*/false));
    if (used)
      return Error{Code::failed_precondition,
                   "egress " + quoted(req.egress_id()) + " is referenced by the policy of a Workspace"};
    KIB_TRY(txn.mark_deleted(store::Kind::egress, req.egress_id()));
    return Resp();
  };
  return env_.commands.run<Resp>(kService + std::string("DeleteEgress"), req, req.command_id(), precheck, apply,
                                 [&] { env_.runtime.egress_deleted(req.egress_id()); });
}

Result<ctrl::UpdateEgressLabelsResponse> EgressService::update_labels(const ctrl::UpdateEgressLabelsRequest& req) {
  return update_metadata<Egress, ctrl::UpdateEgressLabelsResponse>(
      env_.commands, kService + std::string("UpdateEgressLabels"), req, req.egress_id());
}

Result<ctrl::UpdateEgressAnnotationsResponse> EgressService::update_annotations(
    const ctrl::UpdateEgressAnnotationsRequest& req) {
  return update_metadata<Egress, ctrl::UpdateEgressAnnotationsResponse>(
      env_.commands, kService + std::string("UpdateEgressAnnotations"), req, req.egress_id());
}

Status EgressService::publish_all() {
  KIB_TRY_ASSIGN(auto all, load_all<Egress>(env_.store));
  for (const auto& e : all) publish(e, 0);
  return {};
}

void EgressService::register_methods(MethodRegistry& reg) {
  const std::string s = kService;
  reg.add<ctrl::CreateEgressRequest, ctrl::CreateEgressResponse>(
      s + "CreateEgress", [this](const auto& r, const CallContext&) { return create(r); });
  reg.add<ctrl::GetEgressRequest, ctrl::GetEgressResponse>(
      s + "GetEgress", [this](const auto& r, const CallContext&) { return get(r); });
  reg.add<ctrl::ListEgressesRequest, ctrl::ListEgressesResponse>(
      s + "ListEgresses", [this](const auto& r, const CallContext&) { return list(r); });
  reg.add<ctrl::UpdateEgressRequest, ctrl::UpdateEgressResponse>(
      s + "UpdateEgress", [this](const auto& r, const CallContext&) { return update(r); });
  reg.add<ctrl::DeleteEgressRequest, ctrl::DeleteEgressResponse>(
      s + "DeleteEgress", [this](const auto& r, const CallContext&) { return remove(r); });
  reg.add<ctrl::UpdateEgressLabelsRequest, ctrl::UpdateEgressLabelsResponse>(
      s + "UpdateEgressLabels", [this](const auto& r, const CallContext&) { return update_labels(r); });
  reg.add<ctrl::UpdateEgressAnnotationsRequest, ctrl::UpdateEgressAnnotationsResponse>(
      s + "UpdateEgressAnnotations", [this](const auto& r, const CallContext&) { return update_annotations(r); });
}

}  // namespace kib::api
