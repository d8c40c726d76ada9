#pragma once
// kibotosctl's commands as data: one row per RPC. Each flag names the request field
// it fills (a dotted path such as "spec.socks5.address"), so one generic builder
// serves every command instead of one hand-written function per RPC.
#include <string_view>
#include <vector>

namespace kib::ctl {

// How a flag's value reaches the request.
enum class Bind {
  string,        // --flag VALUE -> string field
  uint,          // --flag N -> uint32/uint64 field
  enable,        // --flag (no value) -> bool field set to true
  presence,      // --flag (no value) -> message field present (empty)
  file,          // --flag FILE ("-" = stdin) -> string field with the file's bytes
  secret_file,   // as file, one trailing newline removed; for passwords, never on argv
  key_value,     // --flag k=v, repeatable -> map<string,string> field
  message_file,  // --flag FILE: YAML or proto3 JSON -> message field
  client,        // handled by kibotosctl itself, not sent (e.g. --all)
};

struct FlagSpec {
  std::string_view name;   // without the leading "--"
  std::string_view field;  // request field path; empty for Bind::client
  Bind bind;
  bool required;
  std::string_view help;
};

struct CommandSpec {
  std::string_view group;            // "egress"
  std::string_view verb;             // "create"; empty for a group with one command ("agent")
  std::string_view method;           // "kibotos.ctrl.v1.EgressService.CreateEgress"
  std::string_view positional;       // request field of the positional ID, or empty
  std::string_view positional_name;  // "EGRESS_ID"
  bool write;                        // carries command_id
  bool pages;                        // list: honours --all
  std::string_view output_field;     // print this part of the response; empty = all
  std::vector<FlagSpec> flags;
  std::string_view help;
};

bool takes_value(Bind b);
const std::vector<CommandSpec>& command_table();
// Flags every command accepts (output, connection, command ID).
const std::vector<FlagSpec>& global_flags();
const CommandSpec* find_command(std::string_view group, std::string_view verb);
const FlagSpec* find_flag(const std::vector<FlagSpec>& flags, std::string_view name);
bool group_exists(std::string_view group);
bool group_has_verbs(std::string_view group);

}  // namespace kib::ctl
