#pragma once
// The configuration the daemon runs with: embedded defaults, then systemd's
// $STATE_DIRECTORY / $RUNTIME_DIRECTORY (when set), then the config file, then the
// checks that need libraries built after agent/config (CIDR syntax).
#include <string>

#include "agent/config/config.h"

namespace kib::daemon {

// Defaults adjusted by the environment: state_dir = first entry of $STATE_DIRECTORY,
// api.unix_socket = $RUNTIME_DIRECTORY/ctrl.sock. A config file that sets them wins.
Config environment_defaults();
// Loads `file` (empty: no file) over environment_defaults() and validates it all.
Result<Config> load_effective_config(const std::string& file);
// egress.allowed_special_purpose_cidrs with the policy library's CIDR parser.
Status check_config_cidrs(const Config& config);

}  // namespace kib::daemon
