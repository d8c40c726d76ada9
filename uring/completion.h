#pragma once
// Seastar-style completions: every in-flight io_uring operation carries, in its
// user_data, a pointer to the object that owns it plus a small tag naming which of
// its operations completed. The owner must outlive each of its operations: it is
// freed only after the CQE of every operation it submitted (cancelled ones included).
#include <cstdint>

namespace kib::uring {

class Completion {
 public:
  // res/flags are the CQE's. Called on the loop thread, once per CQE.
  virtual void complete(unsigned tag, int32_t res, uint32_t flags) = 0;

 protected:
  ~Completion() = default;
};

// Owners are at least 8-byte aligned, leaving three low bits for the tag.
inline constexpr unsigned kTagBits = 3;
inline constexpr uint64_t kTagMask = (1u << kTagBits) - 1;

inline uint64_t encode_user_data(Completion* c, unsigned tag) {
  return reinterpret_cast<uintptr_t>(c) | (tag & kTagMask);
}
inline Completion* completion_of(uint64_t user_data) { return reinterpret_cast<Completion*>(user_data & ~kTagMask); }
inline unsigned tag_of(uint64_t user_data) { return static_cast<unsigned>(user_data & kTagMask); }

}  // namespace kib::uring
