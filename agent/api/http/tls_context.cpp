#include "agent/api/http/tls_context.h"

#include <openssl/err.h>

namespace kib::api {
namespace {

std::string openssl_errors() {
  std::string out;
  char buf[256];
  while (unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? "" : "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Error tls_error(const std::string& what) { return Error{Code::invalid_argument, what + ": " + openssl_errors()}; }

// Servers choose from their own list: h2 first, then http/1.1.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                void*) {
  static const unsigned char kServerProtos[] = "\x02h2\x08http/1.1";
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kServerProtos, sizeof kServerProtos - 1, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

Result<SslCtxPtr> make_server_tls_context(const TlsListenerConfig& tls) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return tls_error("SSL_CTX_new");
  SSL_CTX* c = ctx.get();
  if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1) return tls_error("TLS 1.2 minimum");
  if (SSL_CTX_use_certificate_chain_file(c, tls.cert.c_str()) != 1) return tls_error("certificate " + tls.cert);
  if (SSL_CTX_use_PrivateKey_file(c, tls.key.c_str(), SSL_FILETYPE_PEM) != 1) return tls_error("key " + tls.key);
  if (SSL_CTX_check_private_key(c) != 1) return tls_error("key " + tls.key + " does not match " + tls.cert);
  if (SSL_CTX_load_verify_locations(c, tls.client_ca.c_str(), nullptr) != 1)
    return tls_error("client CA " + tls.client_ca);
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca.c_str());
  if (names == nullptr) return tls_error("client CA " + tls.client_ca);
  SSL_CTX_set_client_CA_list(c, names);  // takes ownership
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // No resumption: every connection proves its certificate against the current CA.
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_alpn_select_cb(c, select_alpn, nullptr);
  return ctx;
}

Status TlsContextHolder::load() {
  KIB_TRY_ASSIGN(auto ctx, make_server_tls_context(tls_));
  std::shared_ptr<SSL_CTX> fresh(ctx.release(), SslCtxPtr::deleter_type{});
  std::lock_guard lock(mu_);
  ctx_ = std::move(fresh);
  return {};
}

std::shared_ptr<SSL_CTX> TlsContextHolder::current() const {
  std::lock_guard lock(mu_);
  return ctx_;
}

}  // namespace kib::api
