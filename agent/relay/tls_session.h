#pragma once
// One client TLS connection over the buffers of tls_bio.h: the loop moves ciphertext
// between the socket and them; this class never touches a socket.
#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "agent/common/result.h"
#include "agent/relay/tls_bio.h"
#include "agent/relay/tls_context.h"

namespace kib::relay {

class TlsSession {
 public:
  enum class Io { ok, want_read, closed, error };

  static Result<std::unique_ptr<TlsSession>> create(std::shared_ptr<TlsClientContext> ctx);
  TlsSession() = default;
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Ciphertext from the socket, copied in.
  void feed(const uint8_t* data, size_t len) { in_.append(data, len); }
  // Ciphertext from the socket, read in place by the reads until end_loan(), which
  // keeps a copy of what they left (call it before the bytes' buffer is reused).
  void lend(const uint8_t* data, size_t len) { in_.lend(data, len); }
  void end_loan() { in_.end_loan(); }
  // The peer's TCP stream ended.
  void feed_eof() { in_.set_eof(); }
  // Ciphertext to send to the socket (0 when none): copied out, or sent in place
  // (next_out() stays valid until consume_out() took all of it).
  size_t pending_out() const { return out_.pending(); }
  size_t take_out(uint8_t* buf, size_t cap) { return out_.take(buf, cap); }
  std::span<uint8_t> next_out() { return out_.next(); }
  void consume_out(size_t n) { out_.consume(n); }

  // Drives the handshake: ok when done, want_read when it needs more ciphertext.
  Io handshake();
  // Plaintext, as many records as fit in cap: ok with *n > 0; want_read; closed
  // (close_notify or clean EOF); error.
  Io read(uint8_t* buf, size_t cap, size_t* n);
  // Plaintext out: always fully buffered into the write BIO unless error.
  Io write(const uint8_t* data, size_t len);
  // Queues close_notify.
  void shutdown();
  std::string last_error() const { return error_; }
  bool resumed() const;
  // Bytes the ciphertext buffers hold allocated (data or spare capacity).
  size_t bio_capacity() const { return in_.capacity() + out_.capacity(); }
  // Frees the capacity a burst left in the drained ciphertext buffers and OpenSSL's
  // record buffers: for an idle connection (doing so per record or per drain would
  // cost an allocation per burst).
  void release_spare_buffers();

 private:
  Io map_error(int rc, const char* what);
  TlsInbox in_;  // before ssl_, whose BIOs point into them: they outlive it
  TlsOutbox out_;
  SslPtr ssl_;
  std::shared_ptr<TlsClientContext> ctx_;
  std::string error_;
  Io deferred_ = Io::ok;  // closed or error, met by a read that returned plaintext first
};

}  // namespace kib::relay
