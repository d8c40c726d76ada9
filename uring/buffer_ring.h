#pragma once
// A provided buffer ring (IORING_REGISTER_PBUF_RING) shared by every socket of one
// loop: a recv picks a buffer only when data arrives, so an idle connection holds
// none. liburing 2.3 lacks io_uring_setup_buf_ring, so the ring memory is our own
// mmap. A buffer picked by the kernel belongs to the caller until give_back().
// The kernel consumes the ring in FIFO order, which would touch every buffer (and
// keep all of them resident); so only `posted` buffers sit in the ring at a time,
// topped up from a LIFO stack of returned ones: the hot buffers are reused.
#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "agent/common/result.h"

namespace kib::uring {

class BufferRing {
 public:
  // count: a power of two <= 32768; size: bytes per buffer; posted: how many the
  // kernel may pick from before the next top-up (<= count).
  static Result<std::unique_ptr<BufferRing>> create(io_uring* ring, uint16_t group_id, uint32_t count, uint32_t size,
                                                    uint32_t posted);
  ~BufferRing();
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  uint16_t group_id() const { return group_id_; }
  uint32_t buffer_size() const { return size_; }
  uint32_t count() const { return count_; }
  uint8_t* data(uint16_t bid) const { return base_ + static_cast<size_t>(bid) * size_; }
  // Returns a buffer (to the stack, and the ring when it is below its level).
  void give_back(uint16_t bid);
  // Buffers currently owned by the application (picked by the kernel, not yet back).
  uint32_t outstanding() const { return outstanding_; }
  // A CQE carried a buffer: the kernel took it from the ring.
  void note_picked();
  // Buffers the kernel can pick now.
  uint32_t posted() const { return posted_; }

 private:
  BufferRing() = default;
  void top_up();
  io_uring* ring_ = nullptr;
  io_uring_buf_ring* br_ = nullptr;
  size_t ring_bytes_ = 0;
  uint8_t* base_ = nullptr;
  size_t base_bytes_ = 0;
  uint16_t group_id_ = 0;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
  uint32_t outstanding_ = 0;
  uint32_t posted_ = 0;
  uint32_t level_ = 0;
  std::vector<uint16_t> free_;  // LIFO
};

}  // namespace kib::uring
