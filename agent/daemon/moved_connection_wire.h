#pragma once
// A moved relay as one handover message (handover.h): "connection" with the fields
//   <workspace> <egress> <revision> <idle_ms> <drain_left_ms>
//   <guest flow: pending bytes> <flags> <Egress flow: pending bytes> <flags>
// (flags: e = the source's FIN came, s = it was passed on, p = a splice pipe follows,
// - = none), the pending bytes of both flows as the payload, guest flow first, and
// the fds: guest socket, Egress socket, then each flow's pipe (read, write end).
#include <string>
#include <vector>

#include "agent/common/result.h"
#include "agent/daemon/handover.h"
#include "agent/runtime/runtime.h"

namespace kib::daemon {

struct MovedConnectionMessage {
  std::string detail;
  std::string payload;
  std::vector<int> fds;  // borrowed from the connection
};

MovedConnectionMessage encode_moved(const MovedConnection& c);
// invalid_argument for a message that does not describe one (its fds close).
Result<MovedConnection> decode_moved(HandoverMessage message);

}  // namespace kib::daemon
