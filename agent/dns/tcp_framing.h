#pragma once
// DNS over TCP (RFC 1035 4.2.2, RFC 7766): every message is preceded by its length
// as two bytes in network order. Several queries may be in flight on one connection
// and answers may arrive in any order; a read may end anywhere inside a frame.
#include <cstddef>
#include <optional>

#include "agent/dns/dns_message.h"

namespace kib::dns {

// Appends the two-byte length and the message to out. invalid_argument when the
// message is empty or longer than 65535 bytes.
Status append_frame(Bytes& out, ByteView message);

// Reassembles frames from a byte stream read in arbitrary pieces. Holds at most one
// incomplete frame plus what one feed() brought, so memory per connection is bounded
// by the largest frame (64 KiB) plus the caller's read size.
class FrameReassembler {
 public:
  // Adds bytes read from the stream.
  void feed(ByteView bytes);
  // The next complete message, or nullopt when more bytes are needed. A zero-length
  // frame is invalid_argument: the stream is corrupt and the connection must close.
  Result<std::optional<Bytes>> next();
  // Bytes received but not yet returned as a message.
  size_t buffered() const { return buf_.size() - start_; }

 private:
  Bytes buf_;
  size_t start_ = 0;
};

}  // namespace kib::dns
