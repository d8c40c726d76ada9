#pragma once
// The data plane's part of a take-over (handover.h) and of a restart through
// systemd's fd store (fd_store.h). Listeners: the Workspaces' TCP listening sockets,
// "listeners" messages ahead of the API's. Relays, once the new agent serves: the old
// agent moves its established plain relays out of its loops and sends each one as it
// comes; the new agent adopts each into its own loops. Neither side waits for the
// other's loops: a relay is away from both for about one message's time.
#include <chrono>
#include <string_view>
#include <vector>

#include "agent/common/result.h"
#include "agent/daemon/handover.h"

#include "agent/common/unique_fd.h"
#include "agent/runtime/runtime.h"

namespace kib::daemon {

// The old agent's side: "listeners" messages, at most 200 fds each (SCM_RIGHTS
// carries 253).
Status send_listeners(int peer, const std::vector<int>& fds);
// The new agent's side: inherits listeners (netns/inherited_listeners.h) until
// another message comes, and returns that one; `count` adds how many came.
Result<HandoverMessage> receive_listeners(int peer, std::chrono::milliseconds timeout, size_t& count);

// The old agent's side; closes `peer` when done. Connections that cannot be sent
// (the new agent went away) are reset.
void send_relays(UniqueFd peer, Runtime& runtime, std::chrono::milliseconds timeout, std::string_view how);
// The new agent's side: adopts relays until the old agent says "moved" (or is gone);
// returns how many it adopted. `how` begins its log lines.
size_t receive_relays(int peer, Runtime& runtime, std::string_view how);

}  // namespace kib::daemon
