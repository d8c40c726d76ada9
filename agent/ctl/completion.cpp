#include "agent/ctl/completion.h"

#include <dirent.h>

#include <memory>
#include <ostream>
#include <set>

#include "agent/ctl/builtin_commands.h"
#include "agent/ctl/cli_args.h"
#include "agent/ctl/id_lister.h"

namespace kib::ctl {
namespace {

// The flag `name` (without "--"), given the command so far.
const FlagSpec* lookup(const std::string& name, const CommandSpec* cmd) {
  if (const FlagSpec* f = find_flag(global_flags(), name)) return f;
  return cmd ? find_flag(cmd->flags, name) : nullptr;
}

bool wants_file(const FlagSpec& f) {
  return f.bind == Bind::file || f.bind == Bind::secret_file || f.bind == Bind::message_file || f.name == "socket" ||
         f.name == "cert" || f.name == "key" || f.name == "ca";
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return out;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  return out;
}

// --netns takes a name under /run/netns or a path: names, or the paths once the word
// starts with '/'; another path is any file.
std::set<std::string> netns_candidates(const std::string& cur, const std::string& dir) {
  std::set<std::string> out;
  const bool path = !cur.empty() && (cur[0] == '/' || cur[0] == '.');
  if (path && (dir + "/").rfind(cur, 0) != 0 && cur.rfind(dir + "/", 0) != 0) return {"__files__"};
  for (const auto& n : dir_entries(dir)) out.insert(path ? dir + "/" + n : n);
  return out;
}

// What the words before the cursor selected.
struct Context {
  bool help = false;                     // after the word "help"
  const BuiltinSpec* builtin = nullptr;  // after "completion"
  std::string group;
  const CommandSpec* cmd = nullptr;
  bool has_positional = false;
  const FlagSpec* pending = nullptr;  // the flag whose value is under the cursor
  std::string socket, server, cert, key, ca;
};

void remember(Context& ctx, const FlagSpec& f, const std::string& value) {
  if (f.name == "socket") ctx.socket = value;
  if (f.name == "server") ctx.server = value;
  if (f.name == "cert") ctx.cert = value;
  if (f.name == "key") ctx.key = value;
  if (f.name == "ca") ctx.ca = value;
}

Context read_words(const std::vector<std::string>& words) {
  Context ctx;
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string& w = words[i];
    ctx.pending = nullptr;
    if (w.rfind("--", 0) == 0 || w == "-o") {
      std::string name = w == "-o" ? "output" : w.substr(2);
      const auto eq = name.find('=');
      const FlagSpec* f = lookup(name.substr(0, eq), ctx.cmd);
      if (f && eq != std::string::npos) {
        remember(ctx, *f, name.substr(eq + 1));
      } else if (f && takes_value(f->bind)) {
        if (i + 2 == words.size()) ctx.pending = f;
        if (i + 2 < words.size()) remember(ctx, *f, words[i + 1]);
        ++i;
      }
    } else if (w.rfind("-", 0) == 0) {
      continue;  // -oVALUE, -h
    } else if (ctx.builtin) {
      ctx.has_positional = true;
    } else if (ctx.group.empty()) {
      if (w == "help" && !ctx.help) {
        ctx.help = true;
      } else if (const BuiltinSpec* b = find_builtin(w)) {
        ctx.builtin = b;
      } else {
        ctx.group = w;
        if (!group_has_verbs(w)) ctx.cmd = find_command(w, "");
      }
    } else if (ctx.cmd == nullptr) {
      ctx.cmd = find_command(ctx.group, w);
    } else {
      ctx.has_positional = true;
    }
  }
  return ctx;
}

Endpoint endpoint_of(const Context& ctx, const char* env_socket) {
  Endpoint ep;
  ep.unix_socket = !ctx.socket.empty() ? ctx.socket : env_socket && *env_socket ? env_socket : kDefaultSocket;
  ep.server = ctx.server;
  ep.cert = ctx.cert;
  ep.key = ctx.key;
  ep.ca = ctx.ca;
  ep.timeout_seconds = 1;
  ep.max_time_ms = kCompletionTimeoutMs;
  return ep;
}

}  // namespace

std::string completion_candidates(const std::vector<std::string>& words, const CompletionSources& sources) {
  if (words.empty()) return "";
  const std::string& cur = words.back();
  const Context ctx = read_words(words);
  std::set<std::string> out;
  if (ctx.pending) {
    if (ctx.pending->name == "netns") {
      out = netns_candidates(cur, sources.netns_dir);
      if (out.count("__files__")) return "__files__\n";
    } else if (wants_file(*ctx.pending)) {
      return "__files__\n";
    } else if (ctx.pending->name == "output") {
      out = {"table", "json", "yaml", "id"};
    }
  } else if (cur.rfind("-", 0) == 0) {
    for (const auto& f : global_flags()) out.insert("--" + std::string(f.name));
    if (ctx.cmd)
      for (const auto& f : ctx.cmd->flags) out.insert("--" + std::string(f.name));
  } else if (ctx.builtin) {
    if (!ctx.has_positional && !ctx.help)
      for (const auto& c : ctx.builtin->choices) out.emplace(c);
  } else if (ctx.group.empty()) {
    for (const auto& c : command_table()) out.insert(std::string(c.group));
    for (const auto& b : builtin_commands())
      if (!ctx.help || b.name != "help") out.insert(std::string(b.name));
  } else if (ctx.cmd == nullptr) {
    for (const auto& c : command_table())
      if (c.group == ctx.group) out.insert(std::string(c.verb));
  } else if (!ctx.help && !ctx.cmd->positional.empty() && !ctx.has_positional && sources.ids) {
    for (auto& id : sources.ids(*ctx.cmd, endpoint_of(ctx, sources.env_socket))) out.insert(std::move(id));
  }
  std::string text;
  for (const auto& c : out)
    if (c.rfind(cur, 0) == 0) text += c + "\n";
  return text;
}

void print_completions(const std::vector<std::string>& words, std::ostream& out, const char* env_socket) {
  CompletionSources sources;
  sources.env_socket = env_socket;
  sources.ids = list_ids;
  out << completion_candidates(words, sources);
}

}  // namespace kib::ctl
