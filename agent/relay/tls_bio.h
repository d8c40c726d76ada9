#pragma once
// The ciphertext ends of a TlsSession: two BIOs over buffers the session owns, instead
// of OpenSSL's memory BIOs, so that each direction copies its ciphertext once less.
//   In: OpenSSL reads records straight from the bytes the relay lends it for one call
//   (the io_uring buffer they were received into); only what it did not take (a
//   record's unfinished tail) is kept, by copy, for the next read.
//   Out: sealed records are appended to one of two buffers while the relay sends from
//   the other in place; they swap once that one is sent.
#include <openssl/bio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kib::relay {

class TlsInbox {
 public:
  // A BIO reading from this inbox (the caller owns it; it must not outlive the inbox).
  BIO* new_bio();
  // Copied in.
  void append(const uint8_t* data, size_t len);
  // Read in place until end_loan(), which keeps a copy of what was not read.
  void lend(const uint8_t* data, size_t len);
  void end_loan();
  // The stream ended: once empty, reads say end of stream rather than "retry".
  void set_eof() { eof_ = true; }
  bool eof() const { return eof_; }
  size_t pending() const { return kept_.size() - kept_off_ + loan_len_; }
  size_t read(uint8_t* out, size_t cap);
  size_t capacity() const { return kept_.capacity(); }
  // Frees the kept buffer's capacity when it holds nothing.
  void release_spare();

 private:
  std::vector<uint8_t> kept_;
  size_t kept_off_ = 0;
  const uint8_t* loan_ = nullptr;
  size_t loan_len_ = 0;
  bool eof_ = false;
};

class TlsOutbox {
 public:
  BIO* new_bio();
  void append(const uint8_t* data, size_t len);
  size_t pending() const { return sending_.size() - sent_ + filling_.size(); }
  // The bytes to send next, in place: they stay put until consume() has taken them
  // all, while appends go to the other buffer.
  std::span<uint8_t> next();
  void consume(size_t n);
  // Copied out, as many as fit.
  size_t take(uint8_t* out, size_t cap);
  size_t capacity() const { return sending_.capacity() + filling_.capacity(); }
  // Frees the capacity of each buffer that holds nothing (none that a send reads from).
  void release_spare();

 private:
  std::vector<uint8_t> sending_;
  size_t sent_ = 0;
  std::vector<uint8_t> filling_;
};

}  // namespace kib::relay
