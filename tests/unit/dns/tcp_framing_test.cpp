#include <doctest/doctest.h>

#include "agent/dns/tcp_framing.h"
#include "dns_test_messages.h"

using namespace kib::dns;

namespace {

Bytes frames_of(const std::vector<Bytes>& messages) {
  Bytes out;
  for (const auto& m : messages) REQUIRE(append_frame(out, m).ok());
  return out;
}

std::vector<Bytes> drain(FrameReassembler& r) {
  std::vector<Bytes> out;
  for (;;) {
    auto next = r.next();
    REQUIRE(next.ok());
    if (!next->has_value()) return out;
    out.push_back(std::move(**next));
  }
}

}  // namespace

TEST_CASE("a frame is the two-byte big-endian length then the message") {
  Bytes m(300, 0x5a);
  Bytes out;
  REQUIRE(append_frame(out, m).ok());
  REQUIRE(out.size() == 302);
  CHECK(out[0] == 0x01);
  CHECK(out[1] == 0x2c);
}

TEST_CASE("empty and oversized messages cannot be framed") {
  Bytes out;
  CHECK_FALSE(append_frame(out, Bytes{}).ok());
  CHECK_FALSE(append_frame(out, Bytes(65536, 0)).ok());
  CHECK(append_frame(out, Bytes(65535, 0)).ok());
}

TEST_CASE("pipelined frames read byte by byte come out whole and in order") {
  std::vector<Bytes> sent = {test::query(1, "a.example", 1), test::query(2, "bb.example", 28), Bytes(65535, 0x11)};
  Bytes stream = frames_of(sent);
  FrameReassembler r;
  std::vector<Bytes> got;
  for (uint8_t byte : stream) {
    r.feed(ByteView(&byte, 1));
    for (auto& m : drain(r)) got.push_back(std::move(m));
  }
  CHECK(got == sent);
  CHECK(r.buffered() == 0);
}

TEST_CASE("frames split at every possible point reassemble") {
  std::vector<Bytes> sent = {test::query(1, "a.example", 1), test::query(2, "b.example", 1)};
  Bytes stream = frames_of(sent);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameReassembler r;
    r.feed(ByteView(stream).first(cut));
    std::vector<Bytes> got = drain(r);
    r.feed(ByteView(stream).subspan(cut));
    for (auto& m : drain(r)) got.push_back(std::move(m));
    CHECK(got == sent);
  }
}

TEST_CASE("a zero-length frame is a corrupt stream") {
  FrameReassembler r;
  const uint8_t zero[] = {0, 0};
  r.feed(zero);
  CHECK_FALSE(r.next().ok());
}

TEST_CASE("the reassembler's memory stays bounded over a long stream") {
  FrameReassembler r;
  Bytes one = frames_of({test::query(1, "a.example", 1)});
  for (int i = 0; i < 10000; ++i) {
    r.feed(ByteView(one).first(5));
    CHECK(drain(r).empty());
    r.feed(ByteView(one).subspan(5));
    CHECK(drain(r).size() == 1);
  }
  CHECK(r.buffered() == 0);
}
