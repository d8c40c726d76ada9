#include "uring/buffer_ring.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace kib::uring {

Result<std::unique_ptr<BufferRing>> BufferRing::create(io_uring* ring, uint16_t group_id, uint32_t count, uint32_t size,
                                                       uint32_t posted) {
  if (count == 0 || count > 32768 || (count & (count - 1)) != 0)
    return Error{Code::invalid_argument, "buffer ring size must be a power of two <= 32768"};
  std::unique_ptr<BufferRing> b(new BufferRing());
  b->ring_ = ring;
  b->group_id_ = group_id;
  b->count_ = count;
  b->size_ = size;
  b->ring_bytes_ = (count * sizeof(io_uring_buf) + 4095) & ~size_t{4095};
  void* r = mmap(nullptr, b->ring_bytes_, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (r == MAP_FAILED) {
    return Error{Code::resource_exhausted, "mmap of the buffer ring failed"};
  }
  b->br_ = static_cast<io_uring_buf_ring*>(r);
  // Buffers are untouched pages until first used: RSS grows only with traffic.
  b->base_bytes_ = static_cast<size_t>(count) * size;
  void* m = mmap(nullptr, b->base_bytes_, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (m == MAP_FAILED) {
    return Error{Code::resource_exhausted, "mmap of the buffer pool failed"};
  }
  b->base_ = static_cast<uint8_t*>(m);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(b->br_);
  reg.ring_entries = count;
  reg.bgid = group_id;
  int rc = io_uring_register_buf_ring(ring, &reg, 0);
  if (rc != 0) {
    b->ring_ = nullptr;
    return Error{Code::failed_precondition, std::string("io_uring_register_buf_ring: ") + strerror(-rc)};
  }
  io_uring_buf_ring_init(b->br_);
  b->level_ = std::max(1u, std::min(posted, count));
  b->free_.reserve(count);
  for (uint32_t i = count; i > 0; --i) b->free_.push_back(static_cast<uint16_t>(i - 1));
  b->top_up();
  return b;
}

BufferRing::~BufferRing() {
  if (ring_ != nullptr) io_uring_unregister_buf_ring(ring_, group_id_);
  if (br_ != nullptr) munmap(br_, ring_bytes_);
  if (base_ != nullptr) munmap(base_, base_bytes_);
}

void BufferRing::top_up() {
  int mask = io_uring_buf_ring_mask(count_);
  int added = 0;
  while (posted_ < level_ && !free_.empty()) {
    uint16_t bid = free_.back();
    free_.pop_back();
    io_uring_buf_ring_add(br_, data(bid), size_, bid, mask, added++);
    ++posted_;
  }
  if (added > 0) io_uring_buf_ring_advance(br_, added);
}

void BufferRing::note_picked() {
  ++outstanding_;
  --posted_;
  top_up();
}

void BufferRing::give_back(uint16_t bid) {
  free_.push_back(bid);
  --outstanding_;
  top_up();
}

}  // namespace kib::uring
