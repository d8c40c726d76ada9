#pragma once
// DNS messages for unit tests, built with c-ares (ares_create_query) so the tests do
// not depend on the code under test to make their inputs.
#include <ares.h>

#include <cstring>
#include <string>

#include "agent/dns/dns_message.h"

namespace kib::dns::test {

// A query for name/type with ID id; with edns_size > 0, an OPT record advertising it.
inline Bytes query(uint16_t id, const std::string& name, int type, int edns_size = 0) {
  unsigned char* buf = nullptr;
  int len = 0;
  ares_create_query(name.c_str(), 1 /* IN */, type, id, 1 /* RD */, &buf, &len, edns_size);
  Bytes out(buf, buf + len);
  ares_free_string(buf);
  return out;
}

// An answer to q padded to `size` bytes (the padding stands in for records; only the
// header matters to forwarding).
inline Bytes answer_for(const Bytes& q, size_t size) {
  Bytes a = q;
  a[2] |= 0x80;
  a[3] |= 0x80;
  a.resize(size, 0xab);
  return a;
}

// An answer carrying RCODE rcode.
inline Bytes answer_with_rcode(const Bytes& q, uint8_t rcode) {
  Bytes a = answer_for(q, q.size());
  a[3] = static_cast<uint8_t>((a[3] & 0xf0) | rcode);
  return a;
}

}  // namespace kib::dns::test
