#include "agent/ctl/message_file.h"

#include <cstdio>

#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include "agent/ctl/yaml_scalar.h"

namespace kib::ctl {
namespace {

constexpr int kMaxDepth = 64;

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// A plain (unquoted) YAML scalar that JSON can carry as a literal: numbers, booleans
// and null. Everything else, and every quoted scalar, becomes a JSON string.
bool is_json_literal(const std::string& s) { return s == "true" || s == "false" || s == "null" || is_json_number(s); }

Status append_node(std::string& out, const YAML::Node& n, int depth) {
  if (depth > kMaxDepth) return Error{Code::invalid_argument, "nested too deeply"};
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: out += "null"; return {};
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() != "!" && is_json_literal(s)) {
        out += s;
      } else if (n.Tag() != "!" && s == "~") {
        out += "null";
      } else {
        append_json_string(out, s);
      }
      return {};
    }
    case YAML::NodeType::Sequence: {
      out += '[';
      bool first = true;
      for (const auto& item : n) {
        if (!first) out += ',';
        first = false;
        KIB_TRY(append_node(out, item, depth + 1));
      }
      out += ']';
      return {};
    }
    case YAML::NodeType::Map: {
      out += '{';
      bool first = true;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) return Error{Code::invalid_argument, "mapping keys must be strings"};
        if (!first) out += ',';
        first = false;
        append_json_string(out, kv.first.Scalar());
        out += ':';
        KIB_TRY(append_node(out, kv.second, depth + 1));
      }
      out += '}';
      return {};
    }
  }
  return {};
}

}  // namespace

Result<std::string> yaml_to_json(std::string_view yaml_text) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    std::string out;
    KIB_TRY(append_node(out, root, 0));
    return out;
  } catch (const YAML::Exception& e) {
    return Error{Code::invalid_argument, std::string("invalid YAML: ") + e.what()};
  }
}

Status parse_message_text(std::string_view text, const std::string& origin, google::protobuf::Message& out) {
  auto json = yaml_to_json(text);
  // JSON that yaml-cpp refuses (YAML caps implicit keys at 1024 characters; JSON does
  // not) goes to protobuf's parser as it is: what kibotosctl prints, it reads back.
  // Found by tests/fuzz/ctl_message_file_fuzz.cpp.
  if (const size_t first = text.find_first_not_of(" \t\r\n");
      !json.ok() && first != std::string_view::npos && text[first] == '{')
    json = std::string(text);
  if (!json.ok()) return Error{Code::invalid_argument, origin + ": " + json.error().message};
  if (*json == "null") return Error{Code::invalid_argument, origin + ": empty document"};
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // an operator's typo must not pass silently
  const auto st = google::protobuf::util::JsonStringToMessage(*json, &out, opts);
  if (!st.ok())
    return Error{Code::invalid_argument,
                 origin + ": not a valid " + out.GetDescriptor()->name() + ": " + std::string(st.message())};
  return {};
}

}  // namespace kib::ctl
