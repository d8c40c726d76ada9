#include "agent/api/connect/message_codec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>

#include "agent/api/connect/json_keys.h"

namespace kib::api {

namespace pbu = google::protobuf::util;

namespace {

// protobuf's parser follows a syntax error with ~20 bytes of the request around it and
// a caret line; those bytes may be a secret, so only the first line is kept, and the
// position is given instead.
std::string json_failure(std::string_view body, std::string_view message) {
  const size_t eol = message.find('\n');
  if (eol == std::string_view::npos) return std::string(message);
  std::string first(message.substr(0, eol));
  while (!first.empty() && (first.back() == '.' || first.back() == ' ')) first.pop_back();
  const auto offset = json_syntax_error_offset(body);
  if (offset) first += " at " + text_position(body, *offset);
  return first;
}

}  // namespace

std::optional<Codec> codec_for_content_type(std::string_view content_type) {
  // Media type parameters (charset) are allowed; the type itself is case-insensitive.
  std::string_view type = content_type.substr(0, content_type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  std::string lower(type);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "application/json") return Codec::json;
  if (lower == "application/proto") return Codec::proto;
  return std::nullopt;
}

std::string_view content_type_of(Codec codec) {
  return codec == Codec::json ? "application/json" : "application/proto";
}

Status decode_message(Codec codec, const std::string& body, google::protobuf::Message& out) {
  if (codec == Codec::proto) {
    if (!out.ParseFromString(body))
      return Error{Code::invalid_argument, "cannot decode the binary " + out.GetTypeName()};
    return {};
  }
  pbu::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const std::string what = "invalid JSON for " + out.GetTypeName() + ": ";
  // An empty JSON body is not "{}": Connect clients always send an object.
  auto st = pbu::JsonStringToMessage(body, &out, options);
  if (!st.ok()) return Error{Code::invalid_argument, what + json_failure(body, std::string(st.message()))};
  // protobuf keeps the last of two values for one key; a request that says two things
  // is refused, whole.
  if (auto unique = check_unique_json_keys(body, *out.GetDescriptor()); !unique.ok()) {
    out.Clear();
    return Error{Code::invalid_argument, what + unique.error().message};
  }
  return {};
}

Result<std::string> encode_message(Codec codec, const google::protobuf::Message& msg) {
  std::string out;
  if (codec == Codec::proto) {
    if (!msg.SerializeToString(&out)) return Error{Code::internal, "cannot encode " + msg.GetTypeName()};
    return out;
  }
  pbu::JsonPrintOptions options;  // lowerCamelCase names, as the proto3 JSON mapping says
  auto st = pbu::MessageToJsonString(msg, &out, options);
  if (!st.ok()) return Error{Code::internal, "cannot encode " + msg.GetTypeName() + ": " + std::string(st.message())};
  return out;
}

}  // namespace kib::api
