#include "agent/ctl/builtin_commands.h"

namespace kib::ctl {

const std::vector<BuiltinSpec>& builtin_commands() {
  static const std::vector<BuiltinSpec> builtins = {
      {"completion", "SHELL", {"bash", "zsh", "fish"}, true, "print the completion script for bash, zsh or fish"},
      {"help", "[GROUP [COMMAND]]", {}, false, "show the commands of a group, or a command's flags"},
  };
  return builtins;
}

const BuiltinSpec* find_builtin(std::string_view name) {
  for (const auto& b : builtin_commands())
    if (b.name == name) return &b;
  return nullptr;
}

}  // namespace kib::ctl
