#pragma once
// A ring's table of direct descriptors (io_uring "fixed files"): sockets the ring
// reaches by slot, not by fd, so they do not count against the process's fd table
// (RLIMIT_NOFILE bounds the two separately). Slots are handed out by this table; the
// kernel installs into a given slot (IORING_OP_SOCKET with file_index).
#include <liburing.h>

#include <cstdint>
#include <vector>

#include "agent/common/result.h"

namespace kib::uring {

class FileSlots {
 public:
  FileSlots() = default;  // no table: take() always returns -1
  // Registers a sparse table of `count` slots on ring (count ≤ RLIMIT_NOFILE).
  static Result<FileSlots> register_on(io_uring* ring, uint32_t count);

  // A free slot, or -1 when none is left (the caller uses a plain fd instead).
  int take();
  // The slot's file must already be closed, or its close queued ahead of any reuse.
  void put(int slot) { free_.push_back(static_cast<uint32_t>(slot)); }
  uint32_t capacity() const { return capacity_; }
  uint32_t in_use() const { return next_ - static_cast<uint32_t>(free_.size()); }

 private:
  uint32_t capacity_ = 0;
  uint32_t next_ = 0;           // slots below it were handed out at least once
  std::vector<uint32_t> free_;  // returned slots, a stack: the most recent is reused first
};

}  // namespace kib::uring
