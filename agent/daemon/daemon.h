#pragma once
// kibotos-agent's life: configuration, logging, the control plane, the API listeners,
// readiness to systemd, SIGHUP reloads and a clean stop on SIGTERM/SIGINT.
#include <string>
#include <vector>

namespace kib::daemon {

// Returns the process exit code.
int run(const std::vector<std::string>& args);

}  // namespace kib::daemon
