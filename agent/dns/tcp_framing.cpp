#include "agent/dns/tcp_framing.h"

namespace kib::dns {

Status append_frame(Bytes& out, ByteView message) {
  if (message.empty() || message.size() > kMaxMessageSize)
    return make_error(Code::invalid_argument, "DNS message size out of range for a TCP frame");
  out.push_back(static_cast<uint8_t>(message.size() >> 8));
  out.push_back(static_cast<uint8_t>(message.size() & 0xff));
  out.insert(out.end(), message.begin(), message.end());
  return {};
}

void FrameReassembler::feed(ByteView bytes) {
  // Drop what was already returned before growing, so the buffer stays bounded.
  if (start_ > 0 && (start_ == buf_.size() || start_ >= buf_.size() / 2)) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<Bytes>> FrameReassembler::next() {
  if (buffered() < 2) return std::optional<Bytes>{};
  const size_t len = static_cast<size_t>(buf_[start_] << 8 | buf_[start_ + 1]);
  if (len == 0) return make_error(Code::invalid_argument, "zero-length DNS frame");
  if (buffered() < 2 + len) return std::optional<Bytes>{};
  const auto first = buf_.begin() + static_cast<std::ptrdiff_t>(start_ + 2);
  Bytes message(first, first + static_cast<std::ptrdiff_t>(len));
  start_ += 2 + len;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return std::optional<Bytes>(std::move(message));
}

}  // namespace kib::dns
