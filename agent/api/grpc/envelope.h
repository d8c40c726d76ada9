#pragma once
// The length-prefixed messages of gRPC, gRPC-Web and Connect streaming: a flags byte,
// a 4-byte big-endian length, the payload. Pure framing, no I/O.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

struct Envelope {
  static constexpr uint8_t kCompressed = 0x01;
  static constexpr uint8_t kConnectEndStream = 0x02;  // Connect: the end-of-stream message
  static constexpr uint8_t kWebTrailers = 0x80;       // gRPC-Web: the trailers block
  uint8_t flags = 0;
  std::string payload;
};

std::string encode_envelope(uint8_t flags, std::string_view payload);

// Collects bytes as they arrive and cuts them into envelopes. A length over
// max_payload is resource_exhausted as soon as the prefix is in: nothing is buffered.
class EnvelopeReader {
 public:
  explicit EnvelopeReader(size_t max_payload) : max_payload_(max_payload) {}
  void feed(std::string_view data) { buffer_.append(data); }
  // The next whole envelope, nullopt while more bytes are needed, or an error.
  Result<std::optional<Envelope>> next();
  // Bytes of an envelope begun but not whole (at the end of the request: truncated).
  size_t pending() const { return buffer_.size(); }

 private:
  size_t max_payload_;
  std::string buffer_;
};

}  // namespace kib::api
