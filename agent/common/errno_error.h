#pragma once
// Builds an Error from errno, e.g. errno_error("bind /run/kibotos/ctrl.sock").
#include <cerrno>
#include <cstring>
#include <string>

#include "agent/common/result.h"

namespace kib {

// Out of fds, memory or buffers: the agent's own resources, not the caller's input.
inline bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS; }

inline Error errno_error(const std::string& what, int err = errno, Code code = Code::internal) {
  return Error{code, what + ": " + std::strerror(err)};
}

}  // namespace kib
