#pragma once
// One client TLS connection driven through memory BIOs: the loop moves ciphertext
// between the socket and the BIOs; this class never touches a socket.
#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "agent/common/result.h"
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

  // Ciphertext from the socket.
  void feed(const uint8_t* data, size_t len);
  // The peer's TCP stream ended.
  void feed_eof();
  // Ciphertext to send to the socket (0 when none).
  size_t pending_out() const;
  size_t take_out(uint8_t* buf, size_t cap);

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
  // Bytes the two memory BIOs hold allocated (data or spare capacity).
  size_t bio_capacity() const;
  // Swaps each drained memory BIO that kept a burst's capacity for an empty one and
  // frees OpenSSL's record buffers: for an idle connection (doing so per record or per
  // drain would cost an allocation per burst).
  void release_spare_buffers();

 private:
  Io map_error(int rc, const char* what);
  SslPtr ssl_;
  BIO* rbio_ = nullptr;  // owned by ssl_
  BIO* wbio_ = nullptr;  // owned by ssl_
  std::shared_ptr<TlsClientContext> ctx_;
  std::string error_;
  bool eof_ = false;      // the read BIO's "end of stream" was set: it stays
  Io deferred_ = Io::ok;  // closed or error, met by a read that returned plaintext first
};

}  // namespace kib::relay
