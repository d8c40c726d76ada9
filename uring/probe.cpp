#include "uring/probe.h"

#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "uring/socket_ops.h"

namespace kib::uring {
namespace {

std::string disabled_sysctl_value() {
  std::ifstream f("/proc/sys/kernel/io_uring_disabled");
  std::string v;
  if (f) f >> v;
  return v;
}

struct NeededOp {
  int op;
  const char* name;
};

constexpr NeededOp kNeeded[] = {
    {IORING_OP_ACCEPT, "ACCEPT"}, {IORING_OP_CONNECT, "CONNECT"},   {IORING_OP_RECV, "RECV"},
    {IORING_OP_SEND, "SEND"},     {IORING_OP_TIMEOUT, "TIMEOUT"},   {IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"},
    {IORING_OP_READ, "READ"},     {IORING_OP_POLL_ADD, "POLL_ADD"},
};

Status check_buf_ring(io_uring* ring) {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) return Error{Code::resource_exhausted, "mmap for the buffer ring probe failed"};
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(mem);
  reg.ring_entries = 8;
  reg.bgid = 0;
  int r = io_uring_register_buf_ring(ring, &reg, 0);
  if (r == 0) io_uring_unregister_buf_ring(ring, 0);
  munmap(mem, 4096);
  if (r != 0)
    return Error{Code::failed_precondition, std::string("io_uring provided buffer rings unsupported: ") + strerror(-r)};
  return {};
}

// Runs socket -> setsockopt(TCP_NODELAY) -> install on slot 0 of a fresh table and
// checks that the installed fd shows the option set.
Status try_direct_socket(io_uring* ring) {
  if (int r = io_uring_register_files_sparse(ring, 1); r < 0)
    return Error{Code::failed_precondition, std::string("sparse file table: ") + strerror(-r)};
  static const int kOne = 1;
  io_uring_sqe* s = io_uring_get_sqe(ring);
  io_uring_prep_socket_direct(s, AF_INET, SOCK_STREAM, 0, 0, 0);
  io_uring_sqe_set_data64(s, 1);
  s = io_uring_get_sqe(ring);
  prep_setsockopt_direct(s, 0, IPPROTO_TCP, TCP_NODELAY, &kOne, sizeof kOne);
  io_uring_sqe_set_data64(s, 2);
  s = io_uring_get_sqe(ring);
  prep_fixed_fd_install(s, 0);
  io_uring_sqe_set_data64(s, 3);
  if (int r = io_uring_submit_and_wait(ring, 3); r < 0)
    return Error{Code::failed_precondition, std::string("submit: ") + strerror(-r)};
  constexpr const char* kWhat[] = {"", "IORING_OP_SOCKET into a slot", "SOCKET_URING_OP_SETSOCKOPT",
                                   "IORING_OP_FIXED_FD_INSTALL"};
  int res[4] = {0, -EINVAL, -EINVAL, -EINVAL};
  io_uring_cqe* cqe;
  unsigned head, n = 0;
  io_uring_for_each_cqe(ring, head, cqe) {
    ++n;
    if (cqe->user_data >= 1 && cqe->user_data <= 3) res[cqe->user_data] = cqe->res;
  }
  io_uring_cq_advance(ring, n);
  for (int i = 1; i <= 3; ++i)
    if (res[i] < 0) return Error{Code::failed_precondition, std::string(kWhat[i]) + ": " + strerror(-res[i])};
  int v = 0;
  socklen_t len = sizeof v;
  const bool set = getsockopt(res[3], IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v != 0;
  ::close(res[3]);
  if (!set) return Error{Code::failed_precondition, "SOCKET_URING_OP_SETSOCKOPT did not set TCP_NODELAY"};
  return {};
}

}  // namespace

Status probe_direct_sockets() {
  io_uring ring;
  if (int r = io_uring_queue_init(8, &ring, 0); r < 0)
    return Error{Code::failed_precondition, std::string("io_uring: ") + strerror(-r)};
  Status st = try_direct_socket(&ring);
  io_uring_queue_exit(&ring);
  return st;
}

Status probe_kernel_features() {
  io_uring ring;
  int r = io_uring_queue_init(8, &ring, 0);
  if (r < 0) {
    std::string why = strerror(-r);
    std::string v = disabled_sysctl_value();
    if (!v.empty() && v != "0") why += " (kernel.io_uring_disabled=" + v + ")";
    return Error{Code::failed_precondition, "io_uring is unavailable: " + why};
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    io_uring_queue_exit(&ring);
    return Error{Code::failed_precondition, "io_uring_get_probe failed: kernel too old"};
  }
  Status st;
  for (const auto& n : kNeeded) {
    if (!io_uring_opcode_supported(probe, n.op)) {
      st = Error{Code::failed_precondition, std::string("io_uring lacks IORING_OP_") + n.name};
      break;
    }
  }
  io_uring_free_probe(probe);
  if (st.ok() && !(ring.features & IORING_FEAT_FAST_POLL))
    st = Error{Code::failed_precondition, "io_uring lacks IORING_FEAT_FAST_POLL (kernel < 5.7)"};
  if (st.ok()) st = check_buf_ring(&ring);
  io_uring_queue_exit(&ring);
  return st;
}

}  // namespace kib::uring
