#pragma once
// --wait on `workspace create` and `workspace update-policy`: after the write, polls
// the Workspace until the data plane enforces the policy the write stored, i.e.
// network_policy_status.applied_revision equals network_policy.revision and the
// status has no error. Time and the read are passed in, so tests run it on a clock
// of their own.
#include <chrono>
#include <functional>

#include "agent/common/result.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::ctl {

struct WaitClock {
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<void(std::chrono::milliseconds)> sleep;
};

WaitClock real_clock();

// `written` is the Workspace the write returned; `get` reads it again. Returns the
// Workspace as it is once applied; deadline_exceeded after `timeout`, naming the
// revision applied by then and the last error; the read's own error as it is.
Result<kibotos::ctrl::v1::Workspace> wait_policy_applied(
    const kibotos::ctrl::v1::Workspace& written, const std::function<Result<kibotos::ctrl::v1::Workspace>()>& get,
    std::chrono::milliseconds timeout, const WaitClock& clock);

}  // namespace kib::ctl
