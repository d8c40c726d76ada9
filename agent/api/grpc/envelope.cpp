#include "agent/api/grpc/envelope.h"

namespace kib::api {
namespace {

constexpr size_t kPrefix = 5;

uint32_t payload_length(std::string_view prefix) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(prefix[i])); };
  return b(1) << 24 | b(2) << 16 | b(3) << 8 | b(4);
}

}  // namespace

std::string encode_envelope(uint8_t flags, std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out;
  out.reserve(kPrefix + payload.size());
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(payload);
  return out;
}

Result<std::optional<Envelope>> EnvelopeReader::next() {
  if (buffer_.size() < kPrefix) return std::optional<Envelope>();
  const size_t len = payload_length(buffer_);
  if (len > max_payload_)
    return Error{Code::resource_exhausted,
                 "message of " + std::to_string(len) + " bytes is larger than " + std::to_string(max_payload_)};
  if (buffer_.size() < kPrefix + len) return std::optional<Envelope>();
  Envelope e;
  e.flags = static_cast<uint8_t>(buffer_[0]);
  e.payload = buffer_.substr(kPrefix, len);
  buffer_.erase(0, kPrefix + len);
  return std::optional<Envelope>(std::move(e));
}

}  // namespace kib::api
