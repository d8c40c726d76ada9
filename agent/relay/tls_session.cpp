#include "agent/relay/tls_session.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

namespace kib::relay {

Result<std::unique_ptr<TlsSession>> TlsSession::create(std::shared_ptr<TlsClientContext> ctx) {
  auto s = std::make_unique<TlsSession>();
  s->ssl_.reset(SSL_new(ctx->get()));
  if (!s->ssl_) return Error{Code::resource_exhausted, "SSL_new failed"};
  SSL* ssl = s->ssl_.get();
  BioPtr rbio(s->in_.new_bio());
  BioPtr wbio(s->out_.new_bio());
  if (!rbio || !wbio) return Error{Code::resource_exhausted, "BIO_new failed"};
  SSL_set_bio(ssl, rbio.release(), wbio.release());
  SSL_set_connect_state(ssl);
  const std::string& name = ctx->verify_name();
  if (ctx->name_is_ip()) {
    // "no SNI for IP literals, but verify the IP"
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1)
      return Error{Code::invalid_argument, "bad IP for TLS verification: " + name};
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    if (SSL_set1_host(ssl, name.c_str()) != 1) return Error{Code::invalid_argument, "bad TLS server name: " + name};
  }
  if (SSL_SESSION* sess = ctx->take_session_ref()) {
    SSL_set_session(ssl, sess);
    SSL_SESSION_free(sess);
  }
  s->ctx_ = std::move(ctx);
  return s;
}

TlsSession::~TlsSession() {
  // Relayed connections often end with a reset rather than close_notify; OpenSSL
  // would then mark the shared session unresumable for the whole revision.
  if (ssl_) SSL_set_shutdown(ssl_.get(), SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
}

void TlsSession::release_spare_buffers() {
  if (!SSL_is_init_finished(ssl_.get())) return;
  SSL_free_buffers(ssl_.get());  // OpenSSL's record buffers, unless they hold a partial record
  in_.release_spare();
  out_.release_spare();
}

TlsSession::Io TlsSession::map_error(int rc, const char* what) {
  int e = SSL_get_error(ssl_.get(), rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Io::want_read;
  if (e == SSL_ERROR_ZERO_RETURN) return Io::closed;
  long v = SSL_get_verify_result(ssl_.get());
  if (v != X509_V_OK) {
    error_ = std::string("verify: ") + X509_verify_cert_error_string(v);  // the dial says "tls: "
  } else {
    unsigned long ee = ERR_peek_error();
    char buf[256] = "connection closed";
    if (ee != 0) ERR_error_string_n(ee, buf, sizeof buf);
    error_ = std::string(what) + ": " + buf;
  }
  ERR_clear_error();
  return Io::error;
}

TlsSession::Io TlsSession::handshake() {
  int rc = SSL_do_handshake(ssl_.get());
  if (rc == 1) return Io::ok;
  return map_error(rc, "tls handshake");
}

// Every whole record buffered, up to cap: small records go toward the guest in one
// send. An end or error met after some plaintext is reported by the next call, so
// that plaintext goes out first.
TlsSession::Io TlsSession::read(uint8_t* buf, size_t cap, size_t* n) {
  *n = 0;
  if (deferred_ != Io::ok) return deferred_;
  while (*n < cap) {
    size_t got = 0;
    const int rc = SSL_read_ex(ssl_.get(), buf + *n, cap - *n, &got);
    if (rc == 1) {
      *n += got;
      continue;
    }
    const Io io = map_error(rc, "tls read");
    if (*n == 0) return io;
    if (io != Io::want_read) deferred_ = io;
    break;
  }
  return Io::ok;
}

TlsSession::Io TlsSession::write(const uint8_t* data, size_t len) {
  size_t done = 0;
  while (done < len) {
    size_t w = 0;
    int rc = SSL_write_ex(ssl_.get(), data + done, len - done, &w);
    if (rc != 1) return map_error(rc, "tls write");
    done += w;
  }
  return Io::ok;
}

bool TlsSession::resumed() const { return SSL_session_reused(ssl_.get()) == 1; }

void TlsSession::shutdown() {
  SSL_shutdown(ssl_.get());
  ERR_clear_error();
}

}  // namespace kib::relay
