#pragma once
// Help, generated from the command table and the builtins: the overview, one group's
// commands, one command's flags.
#include <string>

#include "agent/ctl/cli_args.h"

namespace kib::ctl {

std::string help_text(const Invocation& inv);

}  // namespace kib::ctl
