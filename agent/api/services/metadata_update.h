#pragma once
// Update<Kind>Labels / Update<Kind>Annotations, the same for every resource (API.md):
// the whole map is replaced under CAS on labels_revision / annotations_revision
// (aborted on mismatch); equal content keeps the revision; the resource's own
// revision is never touched. Nor is updated_at, which moves with revision (the
// spec's or the policy's content), so that equal content keeps both.
#include <map>
#include <string>

#include "agent/api/conventions/labels.h"
#include "agent/common/result.h"

namespace kib::api {

inline bool same_map(const StringMap& a, const StringMap& b) {
  return std::map<std::string, std::string>(a.begin(), a.end()) ==
         std::map<std::string, std::string>(b.begin(), b.end());
}

Status require_expected(uint64_t expected, const char* field);

// Returns whether the map changed. R is ctrl::Egress or ctrl::Workspace.
template <typename R>
Result<bool> replace_labels(R& r, uint64_t expected, const StringMap& labels) {
  if (r.labels_revision() != expected)
    return Error{Code::aborted, "expected_labels_revision " + std::to_string(expected) +
                                    " does not match the current labels_revision " +
                                    std::to_string(r.labels_revision())};
  if (same_map(r.labels(), labels)) return false;
  *r.mutable_labels() = labels;
  r.set_labels_revision(r.labels_revision() + 1);
  return true;
}

template <typename R>
Result<bool> replace_annotations(R& r, uint64_t expected, const StringMap& annotations) {
  if (r.annotations_revision() != expected)
    return Error{Code::aborted, "expected_annotations_revision " + std::to_string(expected) +
                                    " does not match the current annotations_revision " +
                                    std::to_string(r.annotations_revision())};
  if (same_map(r.annotations(), annotations)) return false;
  *r.mutable_annotations() = annotations;
  r.set_annotations_revision(r.annotations_revision() + 1);
  return true;
}

// drain_seconds of UpdateEgress and UpdateNetworkPolicy: "0 to 3600, absent selects 600".
inline constexpr uint32_t kDefaultDrainSeconds = 600;
inline constexpr uint32_t kMaxDrainSeconds = 3600;
template <typename Req>
Result<uint32_t> drain_seconds_of(const Req& req) {
  if (!req.has_drain_seconds()) return kDefaultDrainSeconds;
  if (req.drain_seconds() > kMaxDrainSeconds)
    return Error{Code::invalid_argument, "drain_seconds " + std::to_string(req.drain_seconds()) +
                                             " is above 3600"};
  return req.drain_seconds();
}

}  // namespace kib::api
