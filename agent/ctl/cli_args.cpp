#include "agent/ctl/cli_args.h"

#include <charconv>
#include <optional>
#include <string_view>

#include "agent/ctl/duration_arg.h"

namespace kib::ctl {
namespace {

Error usage(std::string message) { return Error{Code::invalid_argument, std::move(message)}; }

Result<OutputFormat> parse_output(std::string_view v) {
  if (v == "id") return OutputFormat::id;
  if (v == "table") return OutputFormat::table;
  if (v == "json") return OutputFormat::json;
  if (v == "yaml") return OutputFormat::yaml;
  return usage("-o/--output must be table, json or yaml, not '" + std::string(v) + "'");
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
    if (inv_.command == nullptr) return command_word(w);
    if (inv_.command->positional.empty() || !inv_.positional.empty()) return usage("unexpected argument '" + w + "'");
    inv_.positional = w;
    return {};
  }

  Status command_word(const std::string& w) {
    if (inv_.group.empty()) {
      if (!group_exists(w)) return usage("unknown command '" + w + "' (see kibotosctl --help)");
      inv_.group = w;
      if (!group_has_verbs(w)) inv_.command = find_command(w, "");
      return {};
    }
    inv_.command = find_command(inv_.group, w);
    if (inv_.command == nullptr) return usage("unknown command '" + inv_.group + " " + w + "'");
    return {};
  }

  Status flag(const std::string& arg) {
    const bool short_output = arg.rfind("-o", 0) == 0;  // -o VALUE or -oVALUE
    if (arg.rfind("--", 0) != 0 && !short_output && arg != "-h") return usage("unknown flag '" + arg + "'");
    auto [name, inline_value] = split_flag(arg);
    const FlagSpec* f = find_flag(global_flags(), name);
    const bool global = f != nullptr;
    if (!global && inv_.command) f = find_flag(inv_.command->flags, name);
    if (f == nullptr)
      return usage("unknown flag '--" + name + "'" + (inv_.command ? "" : " (flags follow the command)"));
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
    if (inv_.command == nullptr) {
      if (inv_.group.empty()) return usage("no command given (see kibotosctl --help)");
      return usage("'" + inv_.group + "' needs a subcommand (see kibotosctl " + inv_.group + " --help)");
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
};

}  // namespace

Result<Invocation> parse_args(const std::vector<std::string>& args, const char* env_socket) {
  return Parser(args).run(env_socket);
}

}  // namespace kib::ctl
