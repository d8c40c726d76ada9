#pragma once
// kibotosctl as a function of its arguments and streams, so tests drive it directly.
#include <iosfwd>
#include <string>
#include <vector>

namespace kib::ctl {

// `args` excludes argv[0]. `env_socket` is $KIBOTOS_SOCKET or null. Returns the exit
// status (see cli_error.h).
int run_ctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const char* env_socket);

}  // namespace kib::ctl
