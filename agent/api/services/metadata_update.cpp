#include "agent/api/services/metadata_update.h"

namespace kib::api {

// Revisions start at 1, so 0 is a caller that did not say what it observed.
Status require_expected(uint64_t expected, const char* field) {
  if (expected == 0) return Error{Code::invalid_argument, std::string(field) + " is required"};
  return {};
}

}  // namespace kib::api
