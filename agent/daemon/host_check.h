#pragma once
// What `--check-config` checks beyond the file: what the start needs from this host
// (api.unix_socket_group's group, the TLS listener's files, the access log's folder),
// so a config that passes the check does not then fail the start on them.
#include "agent/common/result.h"
#include "agent/config/config.h"

namespace kib::daemon {

Status check_host_prerequisites(const Config& config);

}  // namespace kib::daemon
