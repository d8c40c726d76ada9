#pragma once
// The IDs a command's positional argument may take, asked of the agent for shell
// completion: `egress get <TAB>` lists the Egresses through the group's list command.
#include <string>
#include <vector>

#include "agent/ctl/command_table.h"
#include "agent/ctl/connect_client.h"

namespace kib::ctl {

// The `cmd.positional` field of every item the list command of `cmd.group` returns, at
// most kMaxIdPages pages. Empty on any failure: completion never reports errors.
std::vector<std::string> list_ids(const CommandSpec& cmd, const Endpoint& endpoint);

inline constexpr int kMaxIdPages = 10;

}  // namespace kib::ctl
