#pragma once
// Help and shell-completion candidates, generated from the command table.
#include <string>
#include <vector>

#include "agent/ctl/cli_args.h"

namespace kib::ctl {

std::string help_text(const Invocation& inv);
// `words` are the words after "kibotosctl", the last being the one under the cursor.
// One candidate per line; "__files__" asks the shell to complete file names.
std::string completion_candidates(const std::vector<std::string>& words);

}  // namespace kib::ctl
