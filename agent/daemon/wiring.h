#pragma once
// What the daemon serves: the Runtime (data plane) and the control plane (store +
// services), with their methods registered. The one place to change when parts land.
#include <memory>

#include "agent/api/connect/method_registry.h"
#include "agent/api/services/control_plane.h"
#include "agent/common/result.h"
#include "agent/config/config.h"
#include "agent/dataplane/netns_attacher.h"
#include "agent/runtime/runtime.h"

namespace kib::daemon {

struct Wiring {
  // Declared in dependency order so they are destroyed in reverse: the control plane
  // refers to the runtime, the runtime to the attacher.
  std::unique_ptr<dataplane::NetnsAttacher> attacher;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<api::ControlPlane> control_plane;  // null without the services library
};

Result<Wiring> wire(const Config& config, api::MethodRegistry& registry);

}  // namespace kib::daemon
