#pragma once
// Kernel feature probe, run once at start: the data plane refuses clearly when
// io_uring is disabled or lacks an operation it relies on, rather than failing on
// the first connection.
#include "agent/common/result.h"

namespace kib::uring {

// ok, or failed_precondition naming what is missing (kernel.io_uring_disabled, an
// opcode, multishot accept, provided buffer rings).
Status probe_kernel_features();

}  // namespace kib::uring
