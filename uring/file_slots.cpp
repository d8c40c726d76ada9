#include "uring/file_slots.h"

#include <cstring>
#include <string>

namespace kib::uring {

Result<FileSlots> FileSlots::register_on(io_uring* ring, uint32_t count) {
  FileSlots t;
  if (count == 0) return t;
  int r = io_uring_register_files_sparse(ring, count);
  if (r < 0)
    return Error{Code::failed_precondition,
                 "io_uring_register_files_sparse(" + std::to_string(count) + "): " + strerror(-r)};
  t.capacity_ = count;
  return t;
}

int FileSlots::take() {
  if (free_.empty()) return next_ < capacity_ ? static_cast<int>(next_++) : -1;
  uint32_t s = free_.back();
  free_.pop_back();
  return static_cast<int>(s);
}

}  // namespace kib::uring
