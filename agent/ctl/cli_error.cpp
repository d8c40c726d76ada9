#include "agent/ctl/cli_error.h"

namespace kib::ctl {

int exit_code_for(const Error& e) {
  if (e.code == Code::ok) return 1;  // an error without a code is our own bug
  return kExitCodeBase + static_cast<int>(e.code);
}

std::string error_line(const Error& e) { return "error: " + std::string(code_name(e.code)) + ": " + e.message + "\n"; }

}  // namespace kib::ctl
