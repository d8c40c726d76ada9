#pragma once
// Reads a file named on the command line; "-" is standard input. Bounded, since a
// request body is at most 1 MiB anyway.
#include <string>

#include "agent/common/result.h"

namespace kib::ctl {

inline constexpr size_t kMaxInputBytes = 1 << 20;

Result<std::string> read_input(const std::string& path);

}  // namespace kib::ctl
