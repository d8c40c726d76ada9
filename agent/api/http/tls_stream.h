#pragma once
// A TLS session over an accepted socket (blocking; the socket's timeouts bound the
// handshake and every read).
#include <memory>
#include <string>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/tls_context.h"

namespace kib::api {

class TlsStream final : public ByteStream {
 public:
  // Runs the server handshake; the Error says why a client was refused.
  static Result<std::unique_ptr<TlsStream>> accept(SSL_CTX* ctx, int fd);
  ~TlsStream() override;

  ssize_t read(void* buf, size_t len) override;
  bool write_all(const void* data, size_t len) override;
  bool buffered() const override;

  bool alpn_h2() const;
  // "CN=operator" of the verified client certificate.
  std::string peer_subject() const;

 private:
  explicit TlsStream(SslPtr ssl) : ssl_(std::move(ssl)) {}
  SslPtr ssl_;
};

}  // namespace kib::api
