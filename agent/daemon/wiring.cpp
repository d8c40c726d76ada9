#include "agent/daemon/wiring.h"

#include "agent/runtime/inert_runtime.h"

namespace kib::daemon {

Result<Wiring> wire(const Config& config, api::MethodRegistry& registry) {
  Wiring w;
  // No data plane is linked yet: InertRuntime refuses workspaces rather than pretend.
  w.runtime = std::make_unique<InertRuntime>();
#ifdef KIB_HAVE_CONTROL_PLANE
  auto cp = api::ControlPlane::open(config, *w.runtime);
  if (!cp.ok()) return std::move(cp).error();
  w.control_plane = std::move(*cp);
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
