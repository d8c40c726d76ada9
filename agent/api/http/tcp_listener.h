#pragma once
// A listening TCP socket for "host:port" / "[v6]:port" (the TLS listener).
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::api {

Result<UniqueFd> open_tcp_listener(const std::string& host_port);

}  // namespace kib::api
