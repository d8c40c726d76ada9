#include "agent/ctl/help_text.h"

namespace kib::ctl {
namespace {

std::string padded(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s + " ";
}

std::string flag_lines(const std::vector<FlagSpec>& flags) {
  std::string out;
  for (const auto& f : flags) {
    std::string left = std::string(f.name == "output" ? "  -o, --" : "  --") + std::string(f.name) +
                       (takes_value(f.bind) ? " VALUE" : "");
    out += padded(std::move(left), 28) + std::string(f.help) + (f.required ? " (required)" : "") + "\n";
  }
  return out;
}

std::string command_line(const CommandSpec& c) {
  // Appended piecewise: `" " + std::string(...)` trips GCC 12's -Wrestrict false
  // positive at -O3 (GCC PR 105329, 105651).
  std::string s = "kibotosctl ";
  s += c.group;
  for (std::string_view part : {c.verb, c.positional_name}) {
    if (part.empty()) continue;
    s += ' ';
    s += part;
  }
  return s;
}

// Every command, or one group's: one line each.
std::string overview(std::string_view group) {
  std::string out;
  if (group.empty()) {
    out = "Usage: kibotosctl [flags] COMMAND [ID] [flags]\n\nCommands:\n";
  } else {
    out = "Usage: kibotosctl ";
    out += group;
    out += " COMMAND [ID] [flags]\n\nCommands:\n";
  }
  for (const auto& c : command_table()) {
    if (!group.empty() && c.group != group) continue;
    out += padded("  " + command_line(c).substr(11), 40) + std::string(c.help) + "\n";
  }
  if (group.empty()) {
    for (const auto& b : builtin_commands()) {
      std::string left = "  ";
      left += b.name;
      left += ' ';
      left += b.arg_name;
      out += padded(std::move(left), 40) + std::string(b.help) + "\n";
    }
  }
  out += "\nGlobal flags:\n" + flag_lines(global_flags()) + "\nRun 'kibotosctl ";
  if (!group.empty()) {
    out += group;
    out += ' ';
  }
  return out + "COMMAND --help' for a command's flags. See kibotosctl(1).\n";
}

std::string builtin_help(const BuiltinSpec& b) {
  std::string out = "Usage: kibotosctl ";
  out += b.name;
  out += ' ';
  out += b.arg_name;
  out += "\n\n";
  out += b.help;
  out += ".\n";
  if (b.name == "completion") {
    out +=
        "\nLoad it into the running shell:\n"
        "  bash   source <(kibotosctl completion bash)\n"
        "  zsh    source <(kibotosctl completion zsh)    (after compinit)\n"
        "  fish   kibotosctl completion fish | source\n"
        "The packages install each script where its shell finds it. Completion offers\n"
        "commands, flags, files, namespaces under /run/netns and the IDs the agent lists.\n";
  }
  return out;
}

}  // namespace

std::string help_text(const Invocation& inv) {
  if (inv.builtin) return builtin_help(*inv.builtin);
  if (inv.command == nullptr) return overview(inv.group);
  const CommandSpec& c = *inv.command;
  std::string out = "Usage: " + command_line(c) + " [flags]\n\n" + std::string(c.help) + ".\n";
  if (!c.flags.empty()) out += "\nFlags:\n" + flag_lines(c.flags);
  return out + "\nGlobal flags:\n" + flag_lines(global_flags());
}

}  // namespace kib::ctl
