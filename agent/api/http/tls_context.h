#pragma once
// The TLS listener's SSL_CTX: TLS 1.2+, the server certificate, and a client
// certificate required to chain to the Operator CA ("no certificate, or one from
// another CA, gets no access"). Reloadable: SIGHUP builds a new SSL_CTX for new
// connections while existing ones keep theirs.
#include <openssl/ssl.h>

#include <memory>
#include <mutex>

#include "agent/common/openssl_ptr.h"
#include "agent/common/result.h"
#include "agent/config/config.h"

namespace kib::api {

// Builds a server context from PEM files; errors name the file and OpenSSL's reason.
Result<SslCtxPtr> make_server_tls_context(const TlsListenerConfig& tls);

class TlsContextHolder {
 public:
  explicit TlsContextHolder(TlsListenerConfig tls) : tls_(std::move(tls)) {}
  // (Re)reads the files; on failure the previous context stays in use.
  Status load();
  // The context for a new connection.
  std::shared_ptr<SSL_CTX> current() const;

 private:
  TlsListenerConfig tls_;
  mutable std::mutex mu_;
  std::shared_ptr<SSL_CTX> ctx_;
};

}  // namespace kib::api
