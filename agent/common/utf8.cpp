#include "agent/common/utf8.h"

namespace kib {
namespace {

// The length of the well-formed sequence at the start of `s`, or 0. The second-byte
// ranges are Table 3-7 of the Unicode standard ("Well-Formed UTF-8 Byte Sequences").
size_t sequence_length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = sequence_length(s.substr(i));
    if (n == 0) break;
    i += n;
  }
  return i;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const size_t good = valid_utf8_prefix(s);
    out.append(s.substr(0, good));
    s.remove_prefix(good);
    if (s.empty()) break;
    out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
    s.remove_prefix(1);
  }
  return out;
}

}  // namespace kib
