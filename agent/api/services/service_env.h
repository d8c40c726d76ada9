#pragma once
// What every service handler shares: the store, the runtime, the configuration and
// the seams unit tests replace (clock, name resolution).
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "agent/api/services/command_runner.h"
#include "agent/config/config.h"
#include "agent/policy/ip_address.h"
#include "agent/policy/special_purpose.h"
#include "agent/runtime/runtime.h"
#include "agent/store/store.h"

namespace kib::api {

using Clock = std::function<std::chrono::system_clock::time_point()>;
// Resolves an endpoint hostname once (the create/update check). An empty vector:
// does not resolve.
using ResolveFn = std::function<Result<std::vector<policy::IpAddress>>(const std::string& host)>;

// The seams of ControlPlane::open; empty members select the real ones.
struct ControlPlaneOptions {
  Clock clock;
  // How long command IDs are remembered is measured on this one. Default: `clock` when
  // given, else the system clock anchored to the steady one (anchored_clock.h), so a
  // clock step forgets no ID early and keeps none for ever.
  Clock command_clock;
  ResolveFn resolve;
  // How often a Workspace the runtime failed to enforce is handed to it again, the
  // Workspaces whose path names another namespace are attached again, and a deleted
  // Workspace's rules that could not be removed are tried again; 0: never.
  std::chrono::milliseconds apply_retry_interval{2000};
};

struct ServiceEnv {
  store::Store& store;
  Runtime& runtime;
  Config config;
  Clock clock;
  ResolveFn resolve;
  policy::EndpointAddressPolicy address_policy;
  CommandRunner commands;
};

}  // namespace kib::api
