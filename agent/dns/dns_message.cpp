#include "agent/dns/dns_message.h"

#include <ares.h>

namespace kib::dns {
namespace {

constexpr uint16_t kTypeOpt = 41;

uint16_t be16(ByteView b, size_t at) { return static_cast<uint16_t>(b[at] << 8 | b[at + 1]); }

void put16(std::span<uint8_t> b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v & 0xff);
}

Error malformed(const char* what) { return make_error(Code::invalid_argument, what); }

// Offset just past the (possibly compressed) name at `at`, using c-ares to walk it.
Result<size_t> skip_name(ByteView msg, size_t at) {
  if (at >= msg.size()) return malformed("DNS name runs past the message");
  char* name = nullptr;
  long encoded_len = 0;
  const int rc = ares_expand_name(msg.data() + at, msg.data(), static_cast<int>(msg.size()), &name, &encoded_len);
  if (rc != ARES_SUCCESS) return malformed("bad DNS name");
  ares_free_string(name);
  return at + static_cast<size_t>(encoded_len);
}

}  // namespace

Result<DnsHeader> parse_header(ByteView m) {
  if (m.size() < kHeaderSize) return malformed("DNS message shorter than its header");
  return DnsHeader{be16(m, 0), be16(m, 2), be16(m, 4), be16(m, 6), be16(m, 8), be16(m, 10)};
}

uint16_t read_id(ByteView m) { return be16(m, 0); }

void write_id(std::span<uint8_t> m, uint16_t id) { put16(m, 0, id); }

Result<QueryInfo> inspect_query(ByteView q) {
  auto header = parse_header(q);
  if (!header) return std::move(header).error();
  QueryInfo info;
  info.header = *header;
  if (info.header.is_response()) return malformed("DNS query has QR set");
  if (info.header.qdcount != 1) return malformed("DNS query must carry exactly one question");
  KIB_TRY_ASSIGN(auto name_end, skip_name(q, kHeaderSize));
  info.question_end = name_end + 4;
  if (info.question_end > q.size()) return malformed("DNS question runs past the message");
  // Records after the question: only the additional section's OPT matters to us.
  const unsigned records = info.header.ancount + info.header.nscount + info.header.arcount;
  size_t at = info.question_end;
  for (unsigned i = 0; i < records; ++i) {
    KIB_TRY_ASSIGN(auto rr_name_end, skip_name(q, at));
    at = rr_name_end;
    if (at + 10 > q.size()) return malformed("DNS record runs past the message");
    const uint16_t type = be16(q, at);
    const uint16_t klass = be16(q, at + 2);
    const size_t rdlength = be16(q, at + 8);
    at += 10 + rdlength;
    if (at > q.size()) return malformed("DNS record data runs past the message");
    // RFC 6891 6.2.5: values below 512 are treated as 512.
    if (type == kTypeOpt) info.udp_payload_size = klass < kClassicUdpSize ? kClassicUdpSize : klass;
  }
  return info;
}

Bytes make_reply_from_query(ByteView query, const QueryInfo& info, uint16_t flags) {
  Bytes reply(query.begin(), query.begin() + static_cast<std::ptrdiff_t>(info.question_end));
  put16(reply, 2, static_cast<uint16_t>((info.header.flags & 0x7910) | kFlagResponse | flags));
  put16(reply, 6, 0);
  put16(reply, 8, 0);
  put16(reply, 10, 0);
  return reply;
}

Bytes fit_answer_to_udp(Bytes answer, ByteView query, const QueryInfo& info) {
  if (answer.size() <= info.udp_payload_size) return answer;
  // Keep the upstream's AA/RA/AD/CD and RCODE; opcode and RD come from the query.
  const uint16_t upstream = be16(answer, 2) & 0x04bf;
  Bytes reply = make_reply_from_query(query, info, static_cast<uint16_t>(upstream | kFlagTruncated));
  return reply;
}

}  // namespace kib::dns
