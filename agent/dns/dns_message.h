#pragma once
// The little of a DNS message that forwarding needs (RFC 1035 4.1.1): the header's
// ID, flags, TC bit and counts, where the question ends, and the guest's EDNS0 UDP
// payload size (RFC 6891). Names are skipped with c-ares' ares_expand_name, never
// parsed by hand.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "agent/common/result.h"

namespace kib::dns {

constexpr size_t kHeaderSize = 12;
constexpr size_t kMaxMessageSize = 65535;  // a TCP frame's length field
constexpr uint16_t kClassicUdpSize = 512;  // RFC 1035 4.2.1, without EDNS0

using Bytes = std::vector<uint8_t>;
using ByteView = std::span<const uint8_t>;

struct DnsHeader {
  uint16_t id = 0;
  uint16_t flags = 0;
  uint16_t qdcount = 0;
  uint16_t ancount = 0;
  uint16_t nscount = 0;
  uint16_t arcount = 0;

  bool is_response() const { return (flags & 0x8000) != 0; }
  bool truncated() const { return (flags & 0x0200) != 0; }
  uint8_t opcode() const { return static_cast<uint8_t>((flags >> 11) & 0xf); }
  uint8_t rcode() const { return static_cast<uint8_t>(flags & 0xf); }
};

constexpr uint16_t kFlagResponse = 0x8000;
constexpr uint16_t kFlagTruncated = 0x0200;
constexpr uint8_t kRcodeServfail = 2;

// invalid_argument when shorter than a header.
Result<DnsHeader> parse_header(ByteView message);
uint16_t read_id(ByteView message);  // message.size() >= 2
void write_id(std::span<uint8_t> message, uint16_t id);

struct QueryInfo {
  DnsHeader header;
  size_t question_end = 0;                      // offset just past QTYPE/QCLASS
  uint16_t udp_payload_size = kClassicUdpSize;  // what the guest accepts over UDP
};

// A guest's query: QR clear, exactly one question (what every stub sends),
// well-formed question and additional records. invalid_argument otherwise.
Result<QueryInfo> inspect_query(ByteView query);

// An answer the agent makes itself from the guest's query: the query's header and
// question with QR set, no records. `flags` are OR-ed in (RA, TC, RCODE, ...).
Bytes make_reply_from_query(ByteView query, const QueryInfo& info, uint16_t flags);

// The answer fits the guest's UDP payload size as it is, or it is replaced by a
// truncated reply (TC set, question only, the upstream's RCODE and flags) so the
// guest retries over TCP (RFC 1035 4.2.1, RFC 7766 5).
Bytes fit_answer_to_udp(Bytes answer, ByteView query, const QueryInfo& info);

}  // namespace kib::dns
