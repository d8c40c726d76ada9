#pragma once
// Kernel feature probe, run once at start: the data plane refuses clearly when
// io_uring is disabled or lacks an operation it relies on, rather than failing on
// the first connection.
#include "agent/common/result.h"

namespace kib::uring {

// ok, or failed_precondition naming what is missing (kernel.io_uring_disabled, an
// opcode, multishot accept, provided buffer rings).
Status probe_kernel_features();

// ok when this kernel opens sockets into direct descriptors and can work them as the
// relay needs: IORING_OP_SOCKET into a slot, setsockopt on it (SOCKET_URING_OP_
// SETSOCKOPT, 6.7), and a plain fd for it on demand (IORING_OP_FIXED_FD_INSTALL,
// 6.8). Otherwise failed_precondition naming what failed; the relay then uses
// plain fds for its upstream sockets.
Status probe_direct_sockets();

}  // namespace kib::uring
