#pragma once
// `systemctl restart` without dropping a guest connection, through systemd's
// file-descriptor store (FileDescriptorStoreMax=, sd_pid_notify_with_fds FDSTORE=1):
// systemd keeps what a service stored while a restart job runs and passes it to the
// next process ($LISTEN_FDS, $LISTEN_FDNAMES); a stop closes it.
//
// On a stop signal, when systemd keeps a store for the agent ($NOTIFY_SOCKET, and
// $FDSTORE > 0: systemd 254+ sets it, the shipped unit sets it for older ones), the
// agent writes a take-over's data-plane messages (handover.h, relay_handover.h) into
// one end of a socket pair: its Workspace listeners ("listeners"), "released", each
// established plain relay ("connection"), then "moved". It stores the other end, named
// "kibotos-handover", and exits. The messages and the fds they carry wait in that
// socket; the next agent reads them as a take-over's new side does: the listeners
// before it attaches Workspaces, the relays once it serves.
//
// One fd in systemd's store whatever the number of connections: systemd compares each
// fd it is given with every stored one, and PID 1 must not spend seconds on that. It
// is stored with FDPOLL=0, as its peer is closed and a hang-up must not end it.
// TLS relays and dials cannot move and end with the old process; DNS listeners are
// opened anew (a query in flight times out and the guest retries).
#include <chrono>
#include <optional>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/runtime/runtime.h"

namespace kib::daemon {

inline constexpr const char* kFdStoreName = "kibotos-handover";

// Whether systemd keeps a store for this service ($NOTIFY_SOCKET and $FDSTORE > 0).
bool fd_store_available();

// The stopping agent's side, after its API stopped: stores its listeners and plain
// relays and returns once systemd holds them. Nothing else may run on `runtime` after.
// Relays that do not fit are reset.
Status store_for_restart(Runtime& runtime, std::chrono::milliseconds timeout);

// The starting agent's side, before it attaches Workspaces: the stored socket when
// systemd passed one (it is taken out of the store), its listeners inherited
// (netns/inherited_listeners.h). nullopt when there is none or it cannot be read (a
// stream from another version: its fds close, and the start is cold); the reason is
// logged. Once the agent serves, receive_relays(socket) adopts the relays.
std::optional<UniqueFd> restore_from_fd_store();

}  // namespace kib::daemon
