#pragma once
// What protobuf 3.21's JSON parser lets through: a key given twice in one object (it
// keeps the last), and a syntax error reported with ~20 bytes of the request around it
// (which may be a secret). A small scanner over the JSON that parser accepted, with its
// grammar (single quotes, bare keys, trailing commas), finds both.
#include <google/protobuf/descriptor.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

// invalid_argument naming the first field (or map/Struct key) given twice in one object
// of `json`, the message `type` or nested ones. A field's JSON name and its proto name
// are the same key ("commandId" and "command_id").
Status check_unique_json_keys(std::string_view json, const google::protobuf::Descriptor& type);

// The byte offset at which `json` stops being JSON, or none if it is JSON.
std::optional<size_t> json_syntax_error_offset(std::string_view json);

// "line 2, column 5" (1-based, columns in bytes) for a byte offset of `text`.
std::string text_position(std::string_view text, size_t offset);

}  // namespace kib::api
