#pragma once
// The relays' part of a take-over (handover.h), after the new agent said "ready":
// the old agent moves its established plain relays out of its loops and sends each
// one as it comes; the new agent adopts each into its own loops. Neither side waits
// for the other's loops: a relay is away from both for about one message's time.
#include <chrono>

#include "agent/common/unique_fd.h"
#include "agent/runtime/runtime.h"

namespace kib::daemon {

// The old agent's side; closes `peer` when done. Connections that cannot be sent
// (the new agent went away) are reset.
void send_relays(UniqueFd peer, Runtime& runtime, std::chrono::milliseconds timeout);
// The new agent's side: adopts relays until the old agent says "moved" (or is gone);
// returns how many it adopted.
size_t receive_relays(int peer, Runtime& runtime);

}  // namespace kib::daemon
