#pragma once
// SQE preparation for socket operations on direct descriptors that the installed
// liburing (2.3) has no helpers for. Layouts and values are the kernel's UAPI
// (include/uapi/linux/io_uring.h); the kernel support is probed before use.
#include <liburing.h>

#include <cstdint>

namespace kib::uring {

inline constexpr uint8_t kOpFixedFdInstall = 54;    // IORING_OP_FIXED_FD_INSTALL (6.8)
inline constexpr uint32_t kSocketOpSetsockopt = 3;  // SOCKET_URING_OP_SETSOCKOPT (6.7)

// setsockopt(level, name) on the socket in `slot`. optval is read when the SQE is
// issued (at the next submit): it must live until then.
inline void prep_setsockopt_direct(io_uring_sqe* s, int slot, int level, int name, const void* optval,
                                   uint32_t optlen) {
  io_uring_prep_rw(IORING_OP_URING_CMD, s, slot, nullptr, 0, 0);
  s->flags |= IOSQE_FIXED_FILE;
  s->cmd_op = kSocketOpSetsockopt;
  // The UAPI's {level, optname} overlay `addr`, optlen `file_index`, optval `addr3`.
  s->addr = static_cast<uint64_t>(static_cast<uint32_t>(level)) | (static_cast<uint64_t>(name) << 32);
  s->file_index = optlen;
  s->addr3 = reinterpret_cast<uintptr_t>(optval);
}

// A plain, O_CLOEXEC fd for the socket in `slot` (the CQE's res), for the calls that
// take an fd (splice(2) between two sockets).
inline void prep_fixed_fd_install(io_uring_sqe* s, int slot) {
  io_uring_prep_rw(kOpFixedFdInstall, s, slot, nullptr, 0, 0);
  s->flags |= IOSQE_FIXED_FILE;
}

}  // namespace kib::uring
