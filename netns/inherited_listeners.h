#pragma once
// Listening sockets a take-over brought from the previous agent process
// (daemon/handover.h): the Workspaces' transparent TCP listeners themselves, not new
// ones beside them, so that a SYN queued at the switch stays queued on the same
// socket instead of depending on net.ipv4.tcp_migrate_req (which the shipped unit's
// ProtectKernelTunables=yes keeps the agent from setting). open_transparent_listeners
// takes from here before opening anything on a given port. Process-wide, as the
// sockets arrive before anything is wired; the start ends with clear().
#include <cstddef>
#include <cstdint>
#include <optional>

#include "agent/common/unique_fd.h"

namespace kib::netns {

// Keeps a listening TCP socket (ignored, and closed, when it is not one).
void inherit_listener(UniqueFd fd);
// One inherited listener of the calling thread's namespace with this family and
// port, if any is left.
std::optional<UniqueFd> take_inherited_listener(int family, uint16_t port);
// The port of an inherited listener of the calling thread's namespace (0: none), for
// a Workspace attached afresh (its rules changed between the two agents' versions):
// on that port it takes them too, and the guests' SYNs never meet a missing listener.
uint16_t inherited_port_here();
// Whether any inherited listener is left (cheap: no namespace visit).
bool have_inherited_listeners();
// Closes what no Workspace took (their Workspaces are gone or their ports moved);
// returns how many.
size_t clear_inherited_listeners();

}  // namespace kib::netns
