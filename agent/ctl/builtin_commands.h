#pragma once
// The commands kibotosctl answers itself, without the agent: `help` and `completion`.
// They sit beside the command table (which holds the RPCs) in help, completion and
// "did you mean".
#include <string_view>
#include <vector>

namespace kib::ctl {

struct BuiltinSpec {
  std::string_view name;                  // "completion"
  std::string_view arg_name;              // "SHELL"
  std::vector<std::string_view> choices;  // the values the argument may take; empty: any
  bool arg_required;
  std::string_view help;
};

const std::vector<BuiltinSpec>& builtin_commands();
const BuiltinSpec* find_builtin(std::string_view name);

}  // namespace kib::ctl
