#pragma once
// Reads a protobuf message written by a person: YAML or JSON using the proto3 JSON
// field names (or the proto names). The YAML tree is checked against the message's
// descriptor first, so a mistake is reported as file:line:column with the field's
// path and what would be valid there; enum values may be written short
// (PUBLIC_INTERNET). Then protobuf's own JSON parser fills the message, by the same
// rules the agent applies.
#include <string>
#include <string_view>

#include <google/protobuf/message.h>

#include "agent/common/result.h"

namespace kib::ctl {

// YAML (or JSON, which YAML reads) -> compact JSON text.
Result<std::string> yaml_to_json(std::string_view yaml_text);

// Fills `out` from YAML/JSON text; `origin` names the input in error messages
// ("policy.yaml:3:1: unknown field 'egress'; valid: revision, mode, egresses, resolvers").
Status parse_message_text(std::string_view text, const std::string& origin, google::protobuf::Message& out);

}  // namespace kib::ctl
