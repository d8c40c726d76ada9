#pragma once
// Builds an Error from errno, e.g. errno_error("bind /run/kibotos/ctrl.sock").
#include <cerrno>
#include <cstring>
#include <string>

#include "agent/common/result.h"

namespace kib {

inline Error errno_error(const std::string& what, int err = errno, Code code = Code::internal) {
  return Error{code, what + ": " + std::strerror(err)};
}

}  // namespace kib
