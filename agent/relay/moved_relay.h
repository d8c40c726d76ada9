#pragma once
// A plain relay handed from one agent process to the next (take-over,
// daemon/handover.h): its two sockets and every byte read from one side and not yet
// written to the other, as user bytes or in a splice pipe. Made by
// RelayConnection::move_out once none of its operations is in flight, taken up by
// RelayConnection::resume in the other process.
#include <cstdint>
#include <string>

#include "agent/common/unique_fd.h"
#include "uring/socket_handle.h"

namespace kib::relay {

struct MovedFlow {
  std::string pending;  // read from the source, not yet sent on (sent first)
  UniqueFd pipe_r;      // a bulk flow's splice pipe, with what it holds (sent next)
  UniqueFd pipe_w;
  bool eof = false;   // the source sent FIN
  bool shut = false;  // ... and it was passed on to the destination
};

struct MovedRelay {
  UniqueFd guest;     // the accepted TPROXY socket
  UniqueFd up;        // the socket to the Egress, past its SOCKS5 exchange
  MovedFlow flow[2];  // [0]: guest -> Egress, [1]: Egress -> guest
  std::string egress_id;
  uint64_t revision = 0;
  uint64_t idle_ms = 0;        // since its last byte
  uint64_t drain_left_ms = 0;  // draining: closes this much later (0: not draining)

  // Resets both sockets (an RST, never a FIN that would pass for a clean end).
  void reset() {
    for (UniqueFd* fd : {&guest, &up}) uring::SocketHandle(std::move(*fd)).reset_on_close();
  }
};

}  // namespace kib::relay
