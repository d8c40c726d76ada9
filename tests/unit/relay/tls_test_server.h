#pragma once
// An in-process OpenSSL server on memory BIOs and a self-signed certificate made per
// run (never committed), for the TLS client tests.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace kib::test {

struct Cert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  std::string pem;
  ~Cert() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

// A self-signed certificate for the given SAN ("DNS:x,IP:y"), generated per test run.
inline std::unique_ptr<Cert> make_cert(const char* cn, const char* san) {
  auto c = std::make_unique<Cert>();
  c->key = EVP_EC_gen("P-256");
  c->cert = X509_new();
  X509_set_version(c->cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c->cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(c->cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(c->cert), 3600);
  X509_set_pubkey(c->cert, c->key);
  X509_NAME* name = X509_get_subject_name(c->cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(c->cert, name);
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, c->cert, c->cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, san);
  X509_add_ext(c->cert, ext, -1);
  X509_EXTENSION_free(ext);
  ext = X509V3_EXT_conf_nid(nullptr, &v3, NID_basic_constraints, "critical,CA:TRUE");
  X509_add_ext(c->cert, ext, -1);
  X509_EXTENSION_free(ext);
  X509_sign(c->cert, c->key, EVP_sha256());
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, c->cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  c->pem.assign(data, static_cast<size_t>(n));
  BIO_free(b);
  return c;
}

class Server {
 public:
  Server(const Cert& c, SSL_CTX* shared_ctx = nullptr) {
    ctx_ = shared_ctx != nullptr ? shared_ctx : SSL_CTX_new(TLS_server_method());
    own_ctx_ = shared_ctx == nullptr;
    SSL_CTX_use_certificate(ctx_, c.cert);
    SSL_CTX_use_PrivateKey(ctx_, c.key);
    ssl_ = SSL_new(ctx_);
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(in_, -1);
    SSL_set_bio(ssl_, in_, out_);
    SSL_set_accept_state(ssl_);
  }
  ~Server() {
    // Ended cleanly: OpenSSL drops from its cache the session of a connection freed
    // without a shutdown.
    SSL_set_shutdown(ssl_, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(ssl_);
    if (own_ctx_) SSL_CTX_free(ctx_);
  }
  SSL* ssl() { return ssl_; }
  BIO* in() { return in_; }
  BIO* out() { return out_; }

 private:
  SSL_CTX* ctx_;
  bool own_ctx_;
  SSL* ssl_;
  BIO* in_;
  BIO* out_;
};

// The in-process SOCKS5 server's certificate (socks.test and 127.0.0.1), made once
// per test program.
inline const Cert& socks_server_cert() {
  static auto c = make_cert("socks.test", "DNS:socks.test,IP:127.0.0.1");
  return *c;
}

}  // namespace kib::test
