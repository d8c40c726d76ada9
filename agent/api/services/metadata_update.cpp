#include "agent/api/services/metadata_update.h"

namespace kib::api {

// Revisions start at 1, so 0 is a caller that did not say what it observed.
Status require_expected(uint64_t expected, const char* field) {
  if (expected == 0) return Error{Code::invalid_argument, std::string(field) + " is required"};
  return {};
}

Result<bool> replace_map(const char* name, uint64_t revision, uint64_t expected, const StringMap& wanted,
                         StringMap& map) {
  if (revision != expected)
    return Error{Code::aborted, std::string("expected_") + name + "_revision " + std::to_string(expected) +
                                    " does not match the current " + name + "_revision " + std::to_string(revision)};
  if (same_map(map, wanted)) return false;
  map = wanted;
  return true;
}

}  // namespace kib::api
