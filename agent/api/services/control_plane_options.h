#pragma once
// ControlPlane::open with its seams exposed: unit tests pass a fake clock and a fake
// resolver; the daemon uses ControlPlane::open.
#include "agent/api/services/control_plane.h"
#include "agent/api/services/service_env.h"

namespace kib::api {

Result<std::unique_ptr<ControlPlane>> open_control_plane(const Config& config, Runtime& runtime,
                                                         ControlPlaneOptions options);

}  // namespace kib::api
