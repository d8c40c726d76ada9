#pragma once
// Builds an Error from errno, e.g. errno_error("bind /run/kibotos/ctrl.sock").
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "agent/common/result.h"

namespace kib {

// Out of fds, memory or buffers: the agent's own resources, not the caller's input.
inline bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS; }

// Without a code: resource_exhausted when the agent is out of resources (callers that
// must tell a shortage from a refusal, e.g. repair, look at it), else internal.
inline Error errno_error(const std::string& what, int err = errno, std::optional<Code> code = std::nullopt) {
  const Code c = code ? *code : out_of_resources(err) ? Code::resource_exhausted : Code::internal;
  return Error{c, what + ": " + std::strerror(err)};
}

}  // namespace kib
