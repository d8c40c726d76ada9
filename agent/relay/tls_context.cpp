#include "agent/relay/tls_context.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
#include <map>

namespace kib::relay {

namespace {

std::string openssl_error(const char* what) {
  unsigned long e = ERR_get_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return std::string(what) + ": " + buf;
}

bool is_ip_literal(const std::string& s) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, s.c_str(), &a4) == 1 || inet_pton(AF_INET6, s.c_str(), &a6) == 1;
}

// A new store of the system roots (pem empty) or of the certificates in pem.
Result<std::shared_ptr<X509_STORE>> load_store(const std::string& pem) {
  std::shared_ptr<X509_STORE> store(X509_STORE_new(), X509_STORE_free);
  if (!store) return Error{Code::internal, "X509_STORE_new failed"};
  if (pem.empty()) {
    if (X509_STORE_set_default_paths(store.get()) != 1)
      return Error{Code::internal, openssl_error("loading the system trust roots")};
    return store;
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  int added = 0;
  while (X509Ptr cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    if (X509_STORE_add_cert(store.get(), cert.get()) == 1) ++added;
  }
  ERR_clear_error();  // the PEM loop ends on a "no start line" error
  if (added == 0) return Error{Code::invalid_argument, "ca_cert holds no PEM certificate"};
  return store;
}

int context_index() {
  static const int idx = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return idx;
}

// TLS 1.3 tickets arrive after the handshake: keep the newest for resumption.
int on_new_session(SSL* ssl, SSL_SESSION* sess) {
  auto* self = static_cast<TlsClientContext*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), context_index()));
  if (self != nullptr && SSL_SESSION_is_resumable(sess)) self->remember_session(sess);
  return 0;  // we did not keep the caller's reference
}

}  // namespace

// Keyed by the PEM itself (at most 64 KiB, one per distinct ca_cert: bounded by the
// Egress count); entries whose store every context let go are dropped on the next call.
Result<std::shared_ptr<X509_STORE>> shared_trust_store(const std::string& ca_pem) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<X509_STORE>> stores;
  std::lock_guard lk(mu);
  std::erase_if(stores, [](const auto& e) { return e.second.expired(); });
  if (auto it = stores.find(ca_pem); it != stores.end()) return it->second.lock();
  KIB_TRY_ASSIGN(auto store, load_store(ca_pem));
  stores.emplace(ca_pem, store);
  return store;
}

Result<std::shared_ptr<TlsClientContext>> TlsClientContext::create(const std::string& server_name,
                                                                   const std::string& ca_pem) {
  auto c = std::make_shared<TlsClientContext>();
  c->ctx_.reset(SSL_CTX_new(TLS_client_method()));
  if (!c->ctx_) return Error{Code::internal, openssl_error("SSL_CTX_new")};
  SSL_CTX* ctx = c->ctx_.get();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // No SSL_MODE_RELEASE_BUFFERS: it frees and reallocates the 16 KiB record buffers
  // around every record of a busy connection. A quiet one gives them back instead
  // (TlsSession::release_spare_buffers).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_set_ex_data(ctx, context_index(), c.get());
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
  KIB_TRY_ASSIGN(c->trust_, shared_trust_store(ca_pem));
  SSL_CTX_set1_cert_store(ctx, c->trust_.get());  // a reference of its own
  c->name_ = server_name;
  c->name_is_ip_ = is_ip_literal(server_name);
  return c;
}

SSL_SESSION* TlsClientContext::take_session_ref() {
  const long now = static_cast<long>(std::time(nullptr));
  // Spent (OpenSSL marks a TLS 1.3 session so once a handshake resumed it, or a
  // session whose connection failed) or expired: offering it buys a full handshake.
  auto usable = [now](SSL_SESSION* s) {
    return SSL_SESSION_is_resumable(s) && SSL_SESSION_get_time(s) + SSL_SESSION_get_timeout(s) > now;
  };
  std::lock_guard lk(mu_);
  while (!sessions_.empty()) {
    SSL_SESSION* s = sessions_.back().get();
    if (!usable(s)) {
      sessions_.pop_back();
      continue;
    }
    if (SSL_SESSION_get_protocol_version(s) != TLS1_3_VERSION) {
      SSL_SESSION_up_ref(s);
      return s;
    }
    last_ticket_ = std::move(sessions_.back());
    sessions_.pop_back();
    break;
  }
  // A copy: the handshake that resumes it spends the copy, not the one kept.
  if (last_ticket_ && usable(last_ticket_.get())) return SSL_SESSION_dup(last_ticket_.get());
  return nullptr;
}

void TlsClientContext::remember_session(SSL_SESSION* s) {
  SSL_SESSION_up_ref(s);
  SslSessionPtr p(s);
  std::lock_guard lk(mu_);
  sessions_.push_back(std::move(p));
  if (sessions_.size() > kMaxSessions) sessions_.pop_front();
}

}  // namespace kib::relay
