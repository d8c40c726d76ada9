#include "agent/ctl/message_file.h"

#include <cstdio>

#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include "agent/ctl/json_text.h"

namespace kib::ctl {
namespace {}  // namespace

Result<std::string> yaml_to_json(std::string_view yaml_text) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    return node_to_json(root, false);
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
