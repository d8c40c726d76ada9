#include "agent/ctl/cli_args.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

#include "agent/ctl/duration_arg.h"
#include "agent/ctl/suggest.h"

namespace kib::ctl {
namespace {

Error usage(std::string message) { return Error{Code::invalid_argument, std::move(message)}; }

Result<OutputFormat> parse_output(std::string_view v) {
  if (v == "id") return OutputFormat::id;
  if (v == "table") return OutputFormat::table;
  if (v == "json") return OutputFormat::json;
  if (v == "yaml") return OutputFormat::yaml;
  return usage("-o/--output must be table, json, yaml or id, not '" + std::string(v) + "'" +
               did_you_mean(v, {"table", "json", "yaml", "id"}));
}

std::vector<std::string> group_names() {
  std::vector<std::string> out;
  for (const auto& c : command_table()) out.emplace_back(c.group);
  for (const auto& b : builtin_commands()) out.emplace_back(b.name);
  return out;
}

std::vector<std::string> verb_names(std::string_view group) {
  std::vector<std::string> out;
  for (const auto& c : command_table())
    if (c.group == group) out.emplace_back(c.verb);
  return out;
}

std::vector<std::string> flag_names(const CommandSpec* cmd) {
  std::vector<std::string> out;
  for (const auto& f : global_flags()) out.emplace_back(f.name);
  if (cmd)
    for (const auto& f : cmd->flags) out.emplace_back(f.name);
  return out;
}

Status apply_global(const FlagSpec& f, const std::string& v, GlobalOptions& g) {
  const std::string_view n = f.name;
  if (n == "output") {
    KIB_TRY_ASSIGN(auto o, parse_output(v));
    g.output = o;
  } else if (n == "socket") {
    g.socket = v;
  } else if (n == "server") {
    g.server = v;
  } else if (n == "cert") {
    g.cert = v;
  } else if (n == "key") {
    g.key = v;
  } else if (n == "ca") {
    g.ca = v;
  } else if (n == "command-id") {
    if (v.empty()) return usage("--command-id must not be empty");
    g.command_id = v;
  } else if (n == "timeout") {
    KIB_TRY_ASSIGN(auto t, parse_timeout_seconds(v));
    g.timeout_seconds = t;
  } else if (n == "help") {
    g.help = true;
  } else if (n == "version") {
    g.version = true;
  }
  return {};
}

// Splits "--name=value" / "--name" / "-o" into a flag name and an inline value.
std::pair<std::string, std::optional<std::string>> split_flag(const std::string& arg) {
  if (arg == "-o") return {"output", std::nullopt};
  if (arg.rfind("-o", 0) == 0 && arg.rfind("--", 0) != 0) return {"output", arg.substr(2)};  // -oyaml
  if (arg == "-h") return {"help", std::nullopt};
  std::string body = arg.substr(2);
  const auto eq = body.find('=');
  if (eq == std::string::npos) return {body, std::nullopt};
  return {body.substr(0, eq), body.substr(eq + 1)};
}

class Parser {
 public:
  explicit Parser(const std::vector<std::string>& args) : args_(args) {}

  Result<Invocation> run(const char* env_socket) {
    for (i_ = 0; i_ < args_.size(); ++i_) {
      const std::string& a = args_[i_];
      const bool is_flag = a.size() > 1 && a[0] == '-' && a != "-";
      Status s = is_flag ? flag(a) : word(a);
      if (!s.ok()) return std::move(s).error();
    }
    KIB_TRY(finish());
    inv_.global.socket = !socket_flag_.empty() ? socket_flag_ : env_socket && *env_socket ? env_socket : kDefaultSocket;
    return std::move(inv_);
  }

 private:
  Status word(const std::string& w) {
    if (inv_.builtin) return builtin_arg(w);
    if (inv_.command == nullptr) return command_word(w);
    if (inv_.command->positional.empty() || !inv_.positional.empty()) return usage("unexpected argument '" + w + "'");
    inv_.positional = w;
    return {};
  }

  Status command_word(const std::string& w) {
    if (inv_.group.empty()) {
      if (w == "help" && !help_word_) {  // `help egress create` is `egress create --help`
        help_word_ = true;
        inv_.global.help = true;
        return {};
      }
      if (const BuiltinSpec* b = find_builtin(w)) {
        inv_.builtin = b;
        return {};
      }
      if (!group_exists(w)) {
        const std::string hint = did_you_mean(w, group_names());
        return usage("unknown command '" + w + "'" + (hint.empty() ? " (see kibotosctl --help)" : hint));
      }
      inv_.group = w;
      if (!group_has_verbs(w)) inv_.command = find_command(w, "");
      return {};
    }
    inv_.command = find_command(inv_.group, w);
    if (inv_.command == nullptr) {
      std::string hint = did_you_mean(w, verb_names(inv_.group), "'" + inv_.group + " ", "'");
      if (hint.empty()) hint = " (see kibotosctl " + inv_.group + " --help)";
      return usage("unknown command '" + inv_.group + " " + w + "'" + hint);
    }
    return {};
  }

  Status builtin_arg(const std::string& w) {
    const BuiltinSpec& b = *inv_.builtin;
    if (!inv_.positional.empty()) return usage("unexpected argument '" + w + "'");
    if (!b.choices.empty()) {
      const auto choices = choices_of(b);
      if (std::find(choices.begin(), choices.end(), w) == choices.end())
        return usage(std::string(b.arg_name) + " must be " + join_or(choices) + ", not '" + w + "'" +
                     did_you_mean(w, choices));
    }
    inv_.positional = w;
    return {};
  }

  static std::vector<std::string> choices_of(const BuiltinSpec& b) {
    return std::vector<std::string>(b.choices.begin(), b.choices.end());
  }

  static std::string join_or(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
      out += names[i];
    }
    return out;
  }

  Status flag(const std::string& arg) {
    const bool short_output = arg.rfind("-o", 0) == 0;  // -o VALUE or -oVALUE
    if (arg.rfind("--", 0) != 0 && !short_output && arg != "-h") return usage("unknown flag '" + arg + "'");
    auto [name, inline_value] = split_flag(arg);
    const FlagSpec* f = find_flag(global_flags(), name);
    const bool global = f != nullptr;
    if (!global && inv_.command) f = find_flag(inv_.command->flags, name);
    if (f == nullptr) {
      std::string hint = did_you_mean(name, flag_names(inv_.command), "--", "");
      if (hint.empty() && !inv_.command) hint = " (flags follow the command)";
      return usage("unknown flag '--" + name + "'" + hint);
    }
    std::string value;
    if (takes_value(f->bind)) {
      if (inline_value) {
        value = *inline_value;
      } else if (i_ + 1 < args_.size()) {
        value = args_[++i_];
      } else {
        return usage("flag '--" + name + "' needs a value");
      }
    } else if (inline_value) {
      return usage("flag '--" + name + "' takes no value");
    }
    if (global) {
      if (name == "socket") socket_flag_ = value;
      return apply_global(*f, value, inv_.global);
    }
    if (f->bind == Bind::client) {
      if (name == "all") inv_.global.all = true;
      if (name == "watch") inv_.global.watch = true;
    }
    if (f->bind != Bind::key_value && seen(f)) return usage("flag '--" + name + "' given twice");
    inv_.values.emplace_back(f, std::move(value));
    return {};
  }

  bool seen(const FlagSpec* f) const {
    for (const auto& [g, v] : inv_.values)
      if (g == f) return true;
    return false;
  }

  Status finish() {
    if (inv_.global.help || inv_.global.version) return {};
    if (inv_.builtin) {
      if (inv_.builtin->arg_required && inv_.positional.empty())
        return usage("missing " + std::string(inv_.builtin->arg_name) +
                     (inv_.builtin->choices.empty() ? "" : " (" + join_or(choices_of(*inv_.builtin)) + ")"));
      return {};
    }
    if (inv_.command == nullptr) {
      if (inv_.group.empty()) return usage("no command given (see kibotosctl --help)");
      inv_.global.help = true;  // a group alone: show its commands
      return {};
    }
    const CommandSpec& c = *inv_.command;
    if (!c.positional.empty() && inv_.positional.empty()) return usage("missing " + std::string(c.positional_name));
    for (const auto& f : c.flags)
      if (f.required && !seen(&f)) return usage("missing required flag --" + std::string(f.name));
    if (!inv_.global.command_id.empty() && !c.write) return usage("--command-id applies to writes only");
    if (inv_.global.all && !c.pages) return usage("--all applies to list commands only");
    if (!inv_.global.server.empty() && (inv_.global.cert.empty() || inv_.global.key.empty()))
      return usage("--server needs --cert and --key (the agent requires a client certificate)");
    return {};
  }

  const std::vector<std::string>& args_;
  size_t i_ = 0;
  Invocation inv_;
  std::string socket_flag_;
  bool help_word_ = false;
};

}  // namespace

Result<Invocation> parse_args(const std::vector<std::string>& args, const char* env_socket) {
  return Parser(args).run(env_socket);
}

}  // namespace kib::ctl
