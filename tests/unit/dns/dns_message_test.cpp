#include <doctest/doctest.h>

#include "agent/dns/dns_message.h"
#include "dns_test_messages.h"

using namespace kib::dns;

TEST_CASE("the header gives ID, flags, TC bit and QDCOUNT") {
  Bytes m = test::query(0x1234, "example.com", 1);
  m[2] |= 0x82;  // QR + TC
  auto h = parse_header(m);
  REQUIRE(h.ok());
  CHECK(h->id == 0x1234);
  CHECK(h->is_response());
  CHECK(h->truncated());
  CHECK(h->qdcount == 1);
}

TEST_CASE("a message shorter than a header is invalid") {
  Bytes m(11, 0);
  CHECK_FALSE(parse_header(m).ok());
}

TEST_CASE("write_id rewrites only the ID") {
  Bytes m = test::query(7, "a.example", 1);
  Bytes before = m;
  write_id(m, 0xbeef);
  CHECK(read_id(m) == 0xbeef);
  CHECK(std::equal(m.begin() + 2, m.end(), before.begin() + 2));
}

TEST_CASE("a query's question end and default UDP size are found") {
  Bytes q = test::query(1, "www.example.com", 28);
  auto info = inspect_query(q);
  REQUIRE(info.ok());
  CHECK(info->question_end == q.size());
  CHECK(info->udp_payload_size == kClassicUdpSize);
}

TEST_CASE("the EDNS0 OPT record gives the guest's UDP payload size") {
  Bytes q = test::query(1, "example.com", 1, 1232);
  auto info = inspect_query(q);
  REQUIRE(info.ok());
  CHECK(info->udp_payload_size == 1232);
  CHECK(info->question_end == q.size() - 11);
}

TEST_CASE("an EDNS0 size below 512 counts as 512") {
  auto info = inspect_query(test::query(1, "example.com", 1, 100));
  REQUIRE(info.ok());
  CHECK(info->udp_payload_size == 512);
}

TEST_CASE("malformed queries are refused") {
  Bytes q = test::query(1, "example.com", 1);
  SUBCASE("a response is not a query") {
    q[2] |= 0x80;
    CHECK_FALSE(inspect_query(q).ok());
  }
  SUBCASE("two questions") {
    q[5] = 2;
    CHECK_FALSE(inspect_query(q).ok());
  }
  SUBCASE("a question cut short") {
    q.resize(q.size() - 2);
    CHECK_FALSE(inspect_query(q).ok());
  }
  SUBCASE("a name running past the end") {
    q.resize(kHeaderSize + 3);
    CHECK_FALSE(inspect_query(q).ok());
  }
  SUBCASE("an additional record that is not there") {
    q[11] = 1;
    CHECK_FALSE(inspect_query(q).ok());
  }
}

TEST_CASE("an answer within the guest's UDP size passes unchanged, truncated or not") {
  Bytes q = test::query(9, "example.com", 1, 1232);
  auto info = inspect_query(q);
  REQUIRE(info.ok());
  Bytes a = test::answer_for(q, 1000);
  a[2] |= 0x02;  // TC from the upstream
  CHECK(fit_answer_to_udp(a, q, *info) == a);
}

TEST_CASE("an answer larger than the guest's UDP size becomes a truncated reply") {
  Bytes q = test::query(9, "example.com", 1);
  auto info = inspect_query(q);
  REQUIRE(info.ok());
  Bytes a = test::answer_for(q, 700);
  Bytes r = fit_answer_to_udp(a, q, *info);
  auto h = parse_header(r);
  REQUIRE(h.ok());
  CHECK(r.size() == info->question_end);
  CHECK(h->id == 9);
  CHECK(h->is_response());
  CHECK(h->truncated());
  CHECK(h->qdcount == 1);
  CHECK(h->ancount == 0);
  CHECK(h->arcount == 0);
}

TEST_CASE("the agent's own SERVFAIL keeps the question and the guest's ID") {
  Bytes q = test::query(0x4242, "example.com", 1, 1232);
  auto info = inspect_query(q);
  REQUIRE(info.ok());
  Bytes r = make_reply_from_query(q, *info, kRcodeServfail);
  auto h = parse_header(r);
  REQUIRE(h.ok());
  CHECK(h->id == 0x4242);
  CHECK(h->rcode() == kRcodeServfail);
  CHECK(h->is_response());
  CHECK(std::equal(r.begin() + kHeaderSize, r.end(), q.begin() + kHeaderSize));
}
