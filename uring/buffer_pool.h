#pragma once
// Fixed-size user-space buffers for one loop (TLS plaintext and ciphertext staging,
// where the kernel does not pick the buffer). Held only while data is in flight;
// a bounded free list keeps the hot ones.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace kib::uring {

class BufferPool {
 public:
  explicit BufferPool(size_t size, size_t keep = 256) : size_(size), keep_(keep) {}
  ~BufferPool() {
    for (auto* b : free_) std::free(b);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t buffer_size() const { return size_; }
  // Null only when memory is exhausted.
  uint8_t* take() {
    if (!free_.empty()) {
      uint8_t* b = free_.back();
      free_.pop_back();
      return b;
    }
    return static_cast<uint8_t*>(std::malloc(size_));
  }
  void give_back(uint8_t* b) {
    if (b == nullptr) return;
    if (free_.size() < keep_)
      free_.push_back(b);
    else
      std::free(b);
  }

 private:
  size_t size_;
  size_t keep_;
  std::vector<uint8_t*> free_;
};

}  // namespace kib::uring
