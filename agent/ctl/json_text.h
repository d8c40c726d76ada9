#pragma once
// A YAML node tree as JSON text: what a person wrote (a policy file) on its way to
// protobuf's JSON parser, and what kibotosctl prints with -o json. Plain scalars that
// JSON carries as literals (numbers, true, false, null, ~) stay literals; every other
// scalar, and every quoted one, becomes a JSON string.
#include <string>

#include <yaml-cpp/yaml.h>

#include "agent/common/result.h"

namespace kib::ctl {

// `pretty`: one member per line, indented by two spaces; else compact.
Result<std::string> node_to_json(const YAML::Node& n, bool pretty);

// `s` as a JSON string literal, quotes included.
std::string json_quote(const std::string& s);

}  // namespace kib::ctl
