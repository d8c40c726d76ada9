// TlsInbox and TlsOutbox, through their BIOs as OpenSSL drives them: reads take kept
// bytes before lent ones, a loan leaves only a copy of its unread rest, an empty inbox
// asks to retry until the stream ended, and the bytes being sent stay put while
// writes go on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "agent/relay/tls_bio.h"

using kib::relay::TlsInbox;
using kib::relay::TlsOutbox;

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::string read_some(BIO* b, size_t cap) {
  std::string buf(cap, '\0');
  size_t n = 0;
  if (BIO_read_ex(b, buf.data(), cap, &n) != 1) return {};
  return buf.substr(0, n);
}

}  // namespace

TEST_CASE("the inbox reads kept bytes first, then lent ones; a loan's unread rest is kept by copy") {
  TlsInbox in;
  Bio b(in.new_bio());
  REQUIRE(b);
  in.append(bytes("kept:"), 5);
  std::string loan = "lent-bytes";
  in.lend(bytes(loan), loan.size());
  CHECK(BIO_ctrl_pending(b.get()) == 15);
  CHECK(read_some(b.get(), 9) == "kept:lent");
  in.end_loan();
  loan.assign(loan.size(), 'X');  // the lent buffer goes back and is reused
  CHECK(in.pending() == 6);
  CHECK(read_some(b.get(), 64) == "-bytes");
  CHECK(in.pending() == 0);
}

TEST_CASE("a loan read whole leaves nothing to copy") {
  TlsInbox in;
  Bio b(in.new_bio());
  const std::string loan = "a whole record";
  in.lend(bytes(loan), loan.size());
  CHECK(read_some(b.get(), 64) == loan);
  in.end_loan();
  CHECK(in.pending() == 0);
  CHECK(in.capacity() == 0);  // nothing was copied in
}

TEST_CASE("an empty inbox asks to retry; once the stream ended it reads as the end") {
  TlsInbox in;
  Bio b(in.new_bio());
  char c;
  size_t n = 0;
  CHECK(BIO_read_ex(b.get(), &c, 1, &n) == 0);
  CHECK(BIO_should_retry(b.get()));
  CHECK(BIO_eof(b.get()) == 0);
  in.append(bytes("z"), 1);
  in.set_eof();
  CHECK(BIO_eof(b.get()) == 0);  // bytes before the end still come
  CHECK(read_some(b.get(), 4) == "z");
  CHECK(BIO_read_ex(b.get(), &c, 1, &n) == 0);
  CHECK_FALSE(BIO_should_retry(b.get()));
  CHECK(BIO_eof(b.get()) == 1);
}

TEST_CASE("kept bytes read in part are compacted by the next append; release frees only an empty buffer") {
  TlsInbox in;
  Bio b(in.new_bio());
  in.append(bytes("abcdef"), 6);
  CHECK(read_some(b.get(), 4) == "abcd");
  in.append(bytes("gh"), 2);
  in.release_spare();
  CHECK(in.capacity() > 0);  // still holds "efgh"
  CHECK(read_some(b.get(), 64) == "efgh");
  in.release_spare();
  CHECK(in.capacity() == 0);
}

TEST_CASE("the outbox sends in place: the bytes handed out stay put while writes go on") {
  TlsOutbox out;
  Bio b(out.new_bio());
  REQUIRE(b);
  size_t w = 0;
  REQUIRE(BIO_write_ex(b.get(), "first;", 6, &w) == 1);
  CHECK(w == 6);
  CHECK(BIO_flush(b.get()) == 1);
  const auto sending = out.next();
  REQUIRE(sending.size() == 6);
  const uint8_t* at = sending.data();
  // Written while "first;" is in flight: a large write would move a growing buffer.
  const std::string big(100000, 'b');
  REQUIRE(BIO_write_ex(b.get(), big.data(), big.size(), &w) == 1);
  CHECK(out.pending() == 6 + big.size());
  CHECK(out.next().data() == at);  // the same bytes until they are consumed
  CHECK(std::memcmp(at, "first;", 6) == 0);
  out.consume(4);
  CHECK(std::string(reinterpret_cast<const char*>(out.next().data()), 2) == "t;");
  out.consume(2);
  const auto rest = out.next();
  CHECK(rest.size() == big.size());
  CHECK(std::string(reinterpret_cast<const char*>(rest.data()), rest.size()) == big);
  out.consume(rest.size());
  CHECK(out.pending() == 0);
  CHECK(out.next().empty());
}

TEST_CASE("the outbox copies out across both buffers in order, and frees only empty ones") {
  TlsOutbox out;
  out.append(bytes("abc"), 3);
  (void)out.next();  // "abc" is being sent
  out.append(bytes("defg"), 4);
  uint8_t buf[5];
  CHECK(out.take(buf, sizeof buf) == 5);
  CHECK(std::string(reinterpret_cast<char*>(buf), 5) == "abcde");
  out.release_spare();
  CHECK(out.capacity() > 0);  // "fg" waits
  CHECK(out.take(buf, sizeof buf) == 2);
  CHECK(std::string(reinterpret_cast<char*>(buf), 2) == "fg");
  out.release_spare();
  CHECK(out.capacity() == 0);
}
