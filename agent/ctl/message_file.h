#pragma once
// Reads a protobuf message written by a person: YAML or JSON using the proto3 JSON
// field names. YAML is converted to JSON with yaml-cpp, then protobuf's own JSON
// parser fills the message, so unknown fields and bad enum names are refused by the
// same rules the agent applies.
#include <string>
#include <string_view>

#include <google/protobuf/message.h>

#include "agent/common/result.h"

namespace kib::ctl {

// YAML (or JSON, which YAML reads) -> compact JSON text.
Result<std::string> yaml_to_json(std::string_view yaml_text);

// Fills `out` from YAML/JSON text; `origin` names the input in error messages.
Status parse_message_text(std::string_view text, const std::string& origin, google::protobuf::Message& out);

}  // namespace kib::ctl
