#include "uring/probe.h"

#include <liburing.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

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
    {IORING_OP_ACCEPT, "ACCEPT"},   {IORING_OP_CONNECT, "CONNECT"},
    {IORING_OP_RECV, "RECV"},       {IORING_OP_SEND, "SEND"},
    {IORING_OP_TIMEOUT, "TIMEOUT"}, {IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"},
    {IORING_OP_READ, "READ"},       {IORING_OP_POLL_ADD, "POLL_ADD"},
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
    return Error{Code::failed_precondition,
                 std::string("io_uring provided buffer rings unsupported: ") + strerror(-r)};
  return {};
}

}  // namespace

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
