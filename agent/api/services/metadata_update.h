#pragma once
// Update<Kind>Labels / Update<Kind>Annotations, the same for every resource (API.md):
// the whole map is replaced under CAS on labels_revision / annotations_revision
// (aborted on mismatch); equal content keeps the revision; the resource's own
// revision is never touched. Nor is updated_at, which moves with revision (the
// spec's or the policy's content), so that equal content keeps both.
#include <map>
#include <string>

#include "agent/api/conventions/labels.h"
#include "agent/api/services/command_runner.h"
#include "agent/api/services/stored_resources.h"
#include "agent/common/result.h"

namespace kib::api {

inline bool same_map(const StringMap& a, const StringMap& b) {
  return std::map<std::string, std::string>(a.begin(), a.end()) ==
         std::map<std::string, std::string>(b.begin(), b.end());
}

Status require_expected(uint64_t expected, const char* field);

// Replaces `map` when `expected` is its revision; returns whether it changed.
// `name` is "labels" or "annotations", for the error.
Result<bool> replace_map(const char* name, uint64_t revision, uint64_t expected, const StringMap& wanted,
                         StringMap& map);

// Applies an Update<Kind>Labels or Update<Kind>Annotations request (which, Req tells)
// to R (ctrl::Egress or ctrl::Workspace); returns whether the map changed.
template <typename R, typename Req>
Result<bool> replace_metadata(R& r, const Req& req) {
  if constexpr (requires { req.labels(); }) {
    KIB_TRY_ASSIGN(bool changed, replace_map("labels", r.labels_revision(), req.expected_labels_revision(),
                                             req.labels(), *r.mutable_labels()));
    if (changed) r.set_labels_revision(r.labels_revision() + 1);
    return changed;
  } else {
    KIB_TRY_ASSIGN(bool changed,
                   replace_map("annotations", r.annotations_revision(), req.expected_annotations_revision(),
                               req.annotations(), *r.mutable_annotations()));
    if (changed) r.set_annotations_revision(r.annotations_revision() + 1);
    return changed;
  }
}

// The whole of Update<Kind>Labels / Update<Kind>Annotations: checks, then the
// replacement under the command-ID protocol. `id` is the request's resource ID.
template <typename R, typename Resp, typename Req>
Result<Resp> update_metadata(CommandRunner& commands, const std::string& method, const Req& req,
                             const std::string& id) {
  auto precheck = [&]() -> Status {
    KIB_TRY(require_id<R>(id));
    if constexpr (requires { req.labels(); })
      return validate_labels(req.labels());
    else
      return validate_annotations(req.annotations());
  };
  auto apply = [&](store::Transaction& txn) -> Result<Resp> {
    KIB_TRY_ASSIGN(auto r, must_load<R>(txn, id));
    KIB_TRY_ASSIGN(bool changed, replace_metadata(r, req));
    if (changed) KIB_TRY(save(txn, r));
    Resp resp;
    StoredKind<R>::put(resp, std::move(r));
    return resp;
  };
  return commands.run<Resp>(method, req, req.command_id(), precheck, apply);
}

// drain_seconds of UpdateEgress and UpdateNetworkPolicy: "0 to 3600, absent selects 600".
inline constexpr uint32_t kDefaultDrainSeconds = 600;
inline constexpr uint32_t kMaxDrainSeconds = 3600;
template <typename Req>
Result<uint32_t> drain_seconds_of(const Req& req) {
  if (!req.has_drain_seconds()) return kDefaultDrainSeconds;
  if (req.drain_seconds() > kMaxDrainSeconds)
    return Error{Code::invalid_argument, "drain_seconds " + std::to_string(req.drain_seconds()) + " is above 3600"};
  return req.drain_seconds();
}

}  // namespace kib::api
