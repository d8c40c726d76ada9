#pragma once
// A provided buffer ring (IORING_REGISTER_PBUF_RING) shared by every socket of one
// loop: a recv picks a buffer only when data arrives, so an idle connection holds
// none. liburing 2.3 lacks io_uring_setup_buf_ring, so the ring memory is our own
// mmap. A buffer picked by the kernel belongs to the caller until give_back().
#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "agent/common/result.h"

namespace kib::uring {

class BufferRing {
 public:
  // count: a power of two <= 32768; size: bytes per buffer.
  static Result<std::unique_ptr<BufferRing>> create(io_uring* ring, uint16_t group_id, uint32_t count, uint32_t size);
  ~BufferRing();
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  uint16_t group_id() const { return group_id_; }
  uint32_t buffer_size() const { return size_; }
  uint32_t count() const { return count_; }
  uint8_t* data(uint16_t bid) const { return base_ + static_cast<size_t>(bid) * size_; }
  // Returns a buffer to the kernel.
  void give_back(uint16_t bid);
  // Buffers currently owned by the application (picked by the kernel, not yet back).
  uint32_t outstanding() const { return outstanding_; }
  void note_picked() { ++outstanding_; }

 private:
  BufferRing() = default;
  io_uring* ring_ = nullptr;
  io_uring_buf_ring* br_ = nullptr;
  size_t ring_bytes_ = 0;
  uint8_t* base_ = nullptr;
  size_t base_bytes_ = 0;
  uint16_t group_id_ = 0;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
  uint32_t outstanding_ = 0;
};

}  // namespace kib::uring
