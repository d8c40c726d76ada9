#pragma once
// Turns argv into an Invocation: the command row, its positional ID and the flag
// values in the order given. Knows nothing about protobuf or the network.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "agent/common/result.h"
#include "agent/ctl/builtin_commands.h"
#include "agent/ctl/command_table.h"

namespace kib::ctl {

enum class OutputFormat { table, json, yaml, id };

struct GlobalOptions {
  OutputFormat output = OutputFormat::table;
  std::string socket;  // resolved: flag, else $KIBOTOS_SOCKET, else the default
  std::string server;  // host:port; non-empty selects TLS
  std::string cert, key, ca;
  std::string command_id;
  uint32_t timeout_seconds = 30;
  bool all = false;    // list --all
  bool watch = false;  // workspace connections --watch
  bool help = false;
  bool version = false;
};

struct Invocation {
  const CommandSpec* command = nullptr;  // null with --help/--version alone, or a builtin
  const BuiltinSpec* builtin = nullptr;  // `completion SHELL`; `help` only sets global.help
  std::string group;                     // set when only a group was named (help)
  std::string positional;                // the ID, or the builtin's argument
  std::vector<std::pair<const FlagSpec*, std::string>> values;
  GlobalOptions global;
};

inline constexpr const char* kDefaultSocket = "/run/kibotos/ctrl.sock";

// `env_socket` is $KIBOTOS_SOCKET (null when unset). Errors are usage errors; a
// mistyped command, flag or value names the close matches. A group without its verb
// (`kibotosctl egress`) and `help [GROUP [VERB]]` ask for help.
Result<Invocation> parse_args(const std::vector<std::string>& args, const char* env_socket);

}  // namespace kib::ctl
