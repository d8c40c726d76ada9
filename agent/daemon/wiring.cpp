#include "agent/daemon/wiring.h"

#include "agent/dataplane/dataplane_runtime.h"

namespace kib::daemon {

Result<Wiring> wire(const Config& config, api::MethodRegistry& registry) {
  Wiring w;
  // The data plane starts before the store publishes into it. Without io_uring the
  // agent cannot enforce any Workspace, so it refuses to start (create() says why).
  w.attacher = std::make_unique<dataplane::NetnsAttacher>(config.dataplane.guest_congestion_control,
                                                          config.state_dir + "/attachments");
  KIB_TRY_ASSIGN(auto rt, dataplane::DataplaneRuntime::create(config, *w.attacher));
  w.runtime = std::move(rt);
#ifdef KIB_HAVE_CONTROL_PLANE
  KIB_TRY_ASSIGN(auto cp, api::ControlPlane::open(config, *w.runtime));
  w.control_plane = std::move(cp);
  w.control_plane->register_methods(registry);
  w.control_plane->publish_all();
#else
  // Without the services every method answers `unimplemented`, never a fake success.
  (void)config;
  (void)registry;
#endif
  return w;
}

}  // namespace kib::daemon
