#include "agent/api/http/tls_stream.h"

#include <openssl/err.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>

namespace kib::api {

Result<std::unique_ptr<TlsStream>> TlsStream::accept(SSL_CTX* ctx, int fd) {
  ERR_clear_error();
  SslPtr ssl(SSL_new(ctx));
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return Error{Code::internal, "SSL_new failed"};
  int r = SSL_accept(ssl.get());
  if (r != 1) {
    // SO_RCVTIMEO ran out: OpenSSL reads EAGAIN as "retry" (WANT_READ).
    const int saved_errno = errno;
    const int err = SSL_get_error(ssl.get(), r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ||
        (err == SSL_ERROR_SYSCALL && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK))) {
      ERR_clear_error();
      return Error{Code::deadline_exceeded, "the client sent no handshake in time"};
    }
    char buf[256] = "handshake failed";
    if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return Error{Code::unauthenticated, buf};
  }
  return std::unique_ptr<TlsStream>(new TlsStream(std::move(ssl)));
}

TlsStream::~TlsStream() {
  // A best-effort close_notify; the peer may already be gone.
  SSL_shutdown(ssl_.get());
  ERR_clear_error();
}

ssize_t TlsStream::read(void* buf, size_t len) {
  int n = SSL_read(ssl_.get(), buf, static_cast<int>(len > 1 << 30 ? 1 << 30 : len));
  if (n > 0) return n;
  int err = SSL_get_error(ssl_.get(), n);
  ERR_clear_error();
  return err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

bool TlsStream::write_all(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    int chunk = static_cast<int>(len > 1 << 20 ? 1 << 20 : len);
    int n = SSL_write(ssl_.get(), p, chunk);
    if (n <= 0) {
      ERR_clear_error();
      return false;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// A record read from the socket and not yet returned: poll() no longer sees it.
bool TlsStream::buffered() const { return SSL_has_pending(ssl_.get()) == 1; }

bool TlsStream::alpn_h2() const {
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_.get(), &proto, &len);
  return len == 2 && std::memcmp(proto, "h2", 2) == 0;
}

std::string TlsStream::peer_subject() const {
  X509* cert = SSL_get0_peer_certificate(ssl_.get());
  if (cert == nullptr) return "tls:unknown";
  char cn[256] = "";
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return std::string("tls:CN=") + cn;
}

}  // namespace kib::api
