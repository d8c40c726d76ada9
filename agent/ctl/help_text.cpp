#include "agent/ctl/help_text.h"

#include <set>

namespace kib::ctl {
namespace {

std::string flag_lines(const std::vector<FlagSpec>& flags) {
  std::string out;
  for (const auto& f : flags) {
    std::string left = std::string(f.name == "output" ? "  -o, --" : "  --") + std::string(f.name) +
                       (takes_value(f.bind) ? " VALUE" : "");
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + std::string(f.help) + (f.required ? " (required)" : "") + "\n";
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

std::string overview(std::string_view group) {
  std::string out = "Usage: kibotosctl [flags] COMMAND [ID] [flags]\n\nCommands:\n";
  for (const auto& c : command_table()) {
    if (!group.empty() && c.group != group) continue;
    std::string left = "  " + command_line(c).substr(11);
    if (left.size() < 40) left.resize(40, ' ');
    out += left + " " + std::string(c.help) + "\n";
  }
  return out + "\nFlags:\n" + flag_lines(global_flags()) + "\nSee kibotosctl(1).\n";
}

// Does `name` (a flag without "--") take a value, given the command so far?
const FlagSpec* lookup(const std::string& name, const CommandSpec* cmd) {
  if (const FlagSpec* f = find_flag(global_flags(), name)) return f;
  return cmd ? find_flag(cmd->flags, name) : nullptr;
}

bool wants_file(const FlagSpec& f) {
  return f.bind == Bind::file || f.bind == Bind::secret_file || f.bind == Bind::message_file || f.name == "socket" ||
         f.name == "cert" || f.name == "key" || f.name == "ca";
}

}  // namespace

std::string help_text(const Invocation& inv) {
  if (inv.command == nullptr) return overview(inv.group);
  const CommandSpec& c = *inv.command;
  std::string out = "Usage: " + command_line(c) + " [flags]\n\n" + std::string(c.help) + ".\n";
  if (!c.flags.empty()) out += "\nFlags:\n" + flag_lines(c.flags);
  return out + "\nGlobal flags:\n" + flag_lines(global_flags());
}

std::string completion_candidates(const std::vector<std::string>& words) {
  if (words.empty()) return "";
  const std::string& cur = words.back();
  std::string group;
  const CommandSpec* cmd = nullptr;
  const FlagSpec* pending = nullptr;  // the flag whose value is under the cursor
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string& w = words[i];
    pending = nullptr;
    if (w.rfind("--", 0) == 0 || w == "-o") {
      const std::string name = w == "-o" ? "output" : w.substr(2);
      const FlagSpec* f = name.find('=') == std::string::npos ? lookup(name, cmd) : nullptr;
      if (f && takes_value(f->bind)) {
        if (i + 2 == words.size()) pending = f;
        ++i;
      }
    } else if (group.empty()) {
      group = w;
      if (!group_has_verbs(group)) cmd = find_command(group, "");
    } else if (cmd == nullptr) {
      cmd = find_command(group, w);
    }
  }
  std::set<std::string> out;
  if (pending) {
    if (wants_file(*pending)) return "__files__\n";
    if (pending->name == "output") out = {"table", "json", "yaml"};
  } else if (cur.rfind("-", 0) == 0) {
    for (const auto& f : global_flags()) out.insert("--" + std::string(f.name));
    if (cmd)
      for (const auto& f : cmd->flags) out.insert("--" + std::string(f.name));
  } else if (group.empty()) {
    for (const auto& c : command_table()) out.insert(std::string(c.group));
  } else if (cmd == nullptr) {
    for (const auto& c : command_table())
      if (c.group == group) out.insert(std::string(c.verb));
  }
  std::string text;
  for (const auto& c : out)
    if (c.rfind(cur, 0) == 0) text += c + "\n";
  return text;
}

}  // namespace kib::ctl
