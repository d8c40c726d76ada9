#pragma once
// Ends the TIME_WAIT sockets that relayed guest connections leave in a Workspace
// namespace. Their local end is the guest's original destination (a transparent
// socket), so once the table is gone a routed SYN from the same guest port matches
// one of them in early demux and forwarding drops it: without this sweep the guest
// could not reconnect from that port to that destination for up to 60 s.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "agent/common/result.h"
#include "netns/ruleset_spec.h"

namespace kib::netns {

// Whether a TIME_WAIT socket whose local end is local:port stays (its destination is
// still intercepted: tproxy reopens TIME_WAIT onto the listener).
using KeepTimeWait = std::function<bool(const Prefix& local, uint16_t port)>;

// Destroys (SOCK_DESTROY over NETLINK_SOCK_DIAG) every TCP socket in TIME_WAIT in the
// calling thread's network namespace whose local address is not one of the
// namespace's own addresses, unless keep says otherwise. Returns how many were
// ended; sockets that expired in the meantime are not errors.
Result<size_t> end_transparent_time_wait(const KeepTimeWait& keep);

}  // namespace kib::netns
