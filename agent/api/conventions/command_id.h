#pragma once
// Command IDs (API.md): field 1 of every write request, required, 1 to 128 printable
// ASCII bytes, and the request fingerprint the command log compares retries by.
#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

inline constexpr size_t kMaxCommandIdBytes = 128;

// invalid_argument when missing, too long, or not printable ASCII (0x20..0x7e).
Status validate_command_id(std::string_view id);

// SHA-256 over the method name and the deterministic serialization of the request
// with command_id cleared: equal requests have equal fingerprints whatever their
// map order or encoding on the wire.
std::string request_fingerprint(std::string_view method, const google::protobuf::Message& request);

}  // namespace kib::api
