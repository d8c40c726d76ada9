// Fuzz target: a guest's DNS query and an upstream's answer to it (agent/dns/
// dns_message.cpp): header, question, records, EDNS0 OPT, compression pointers
// (c-ares walks the names, loops included). The input is a query (two-byte length,
// then its bytes) followed by an answer. Checked beyond not crashing: what
// inspect_query accepts is a one-question query whose question lies inside it; the
// replies the agent makes echo it as a response; an answer fitted to the guest's UDP
// size fits it, or is the truncated reply (TC set, the question only).
#include "agent/dns/dns_message.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace dns = kib::dns;

void check_reply(const dns::Bytes& reply, dns::ByteView query, const dns::QueryInfo& info) {
  auto h = dns::parse_header(reply);
  require(h.ok() && h->is_response(), "a made reply is a response");
  require(h->id == info.header.id && h->qdcount == 1, "a made reply keeps the ID and the question");
  require(h->ancount == 0 && h->nscount == 0 && h->arcount == 0, "a made reply carries no records");
  require(reply.size() == info.question_end, "a made reply is header and question");
  require(std::equal(reply.begin() + 12, reply.end(), query.begin() + 12), "a made reply echoes the question");
  require(h->opcode() == info.header.opcode(), "a made reply keeps the opcode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kib::fuzz::FuzzInput in(data, size);
  const dns::ByteView query = in.sized();
  const uint16_t flags = in.u16();
  const dns::ByteView answer = in.rest();
  (void)dns::parse_header(answer);
  auto info = dns::inspect_query(query);
  if (!info.ok()) return 0;
  require(!info->header.is_response() && info->header.qdcount == 1, "an accepted query asks one question");
  require(info->question_end > dns::kHeaderSize && info->question_end <= query.size(),
          "the question lies inside the query");
  require(info->udp_payload_size >= dns::kClassicUdpSize, "the UDP size is at least 512");
  // The agent's own answers: SERVFAIL, REFUSED, TC, whatever flags it ORs in.
  check_reply(dns::make_reply_from_query(query, *info, flags & 0x068f), query, *info);
  if (answer.size() < dns::kHeaderSize) return 0;  // the mux drops those before fitting
  const dns::Bytes fitted = dns::fit_answer_to_udp(dns::Bytes(answer.begin(), answer.end()), query, *info);
  if (answer.size() <= info->udp_payload_size) {
    require(fitted.size() == answer.size() && std::equal(fitted.begin(), fitted.end(), answer.begin()),
            "an answer that fits is passed on as it is");
  } else {
    require(fitted.size() <= info->udp_payload_size, "a fitted answer fits the guest's UDP size");
    check_reply(fitted, query, *info);
    require(dns::parse_header(fitted)->truncated(), "a cut answer is marked truncated");
  }
  return 0;
}
