#pragma once
// The sockaddr_un of a Unix socket path (the API socket, the take-over socket).
#include <sys/un.h>

#include <cstring>
#include <string>

#include "agent/common/result.h"

namespace kib {

inline Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Error{Code::invalid_argument, "socket path too long: " + path};
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace kib
