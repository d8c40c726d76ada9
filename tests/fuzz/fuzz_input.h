#pragma once
// What the fuzz targets share: a reader over the fuzzer's bytes (options first, then
// payloads) and the check that turns a broken invariant into a crash libFuzzer keeps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

namespace kib::fuzz {

// A broken invariant: abort, so libFuzzer saves the input and the replay test fails.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

// Takes the input apart from the front. Past the end it yields zeros and empty
// spans, so a target never reads out of bounds however short its input is.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() << 8 | byte()); }
  // Up to n bytes (fewer at the end).
  std::span<const uint8_t> bytes(size_t n) {
    n = n < size_ - pos_ ? n : size_ - pos_;
    std::span<const uint8_t> s(data_ + pos_, n);
    pos_ += n;
    return s;
  }
  // A payload of the length its two-byte prefix gives (fewer at the end).
  std::span<const uint8_t> sized() { return bytes(u16()); }
  std::span<const uint8_t> rest() { return bytes(size_ - pos_); }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline std::string_view text(std::span<const uint8_t> s) { return {reinterpret_cast<const char*>(s.data()), s.size()}; }

}  // namespace kib::fuzz
