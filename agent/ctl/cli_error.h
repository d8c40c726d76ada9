#pragma once
// How kibotosctl reports a failure: one line on stderr, `error: <code>: <message>`,
// and an exit status that tells the class of error to a script:
//   0 success; 1 internal failure of kibotosctl; 2 usage error (bad flags, unreadable
//   input file); 10 + the Connect code number for an error from the agent or the
//   transport, e.g. 13 invalid_argument, 15 not_found, 19 failed_precondition,
//   20 aborted, 24 unavailable (agent not reachable), 26 unauthenticated.
#include <string>

#include "agent/common/result.h"

namespace kib::ctl {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitCodeBase = 10;

int exit_code_for(const Error& e);
std::string error_line(const Error& e);

}  // namespace kib::ctl
