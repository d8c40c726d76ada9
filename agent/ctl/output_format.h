#pragma once
// Renders a response as a table for people, or as its proto3 JSON / the same as YAML
// for scripts.
#include <string>
#include <string_view>

#include <google/protobuf/message.h>

#include "agent/common/result.h"
#include "agent/ctl/cli_args.h"

namespace kib::ctl {

// The part of `response` named by dotted `path` (a command's output_field); the whole
// response when `path` is empty. Null when a message on the path is absent.
const google::protobuf::Message* select_output(const google::protobuf::Message& response, std::string_view path);

Result<std::string> to_json(const google::protobuf::Message& msg);
Result<std::string> to_yaml(const google::protobuf::Message& msg);
std::string to_table(const google::protobuf::Message& msg);

Result<std::string> format_output(const google::protobuf::Message& msg, OutputFormat format);

}  // namespace kib::ctl
