#pragma once
// The Connect/gRPC status codes. Errors that reach a client carry one of these.
#include <optional>
#include <string_view>

namespace kib {

enum class Code {
  ok = 0,
  canceled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

// The Connect wire name, e.g. "invalid_argument".
std::string_view code_name(Code c);
std::optional<Code> code_from_name(std::string_view name);
// Connect's code -> HTTP status table (connectrpc.com/docs/protocol#error-codes).
int code_http_status(Code c);

}  // namespace kib
