#pragma once
// The two Connect codecs: "json" (proto3 JSON mapping, via protobuf's JSON util) and
// "proto" (binary).
#include <google/protobuf/message.h>

#include <optional>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

enum class Codec { json, proto };

// The codec of a Content-Type ("application/json; charset=utf-8" -> json), or none.
std::optional<Codec> codec_for_content_type(std::string_view content_type);
std::string_view content_type_of(Codec codec);

// Unknown JSON fields are invalid_argument naming the field: an operator's typo must
// not pass silently.
Status decode_message(Codec codec, const std::string& body, google::protobuf::Message& out);
Result<std::string> encode_message(Codec codec, const google::protobuf::Message& msg);

}  // namespace kib::api
