#pragma once
// The client SSL_CTX of one Egress revision: built once when the revision is
// published (not per connection), shared by every connection dialing through it.
// It also keeps the revision's last session for resumption within the revision.
#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>

#include "agent/common/result.h"

namespace kib::relay {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslSessionFree {
  void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
using SslSessionPtr = std::unique_ptr<SSL_SESSION, SslSessionFree>;

class TlsClientContext {
 public:
  // server_name: EgressTls.server_name, or the endpoint host when empty. ca_pem: the
  // Egress's ca_cert (replaces the system roots) or empty for the system roots.
  static Result<std::shared_ptr<TlsClientContext>> create(const std::string& server_name,
                                                          const std::string& ca_pem);
  SSL_CTX* get() const { return ctx_.get(); }
  const std::string& verify_name() const { return name_; }
  bool name_is_ip() const { return name_is_ip_; }

  // Resumption: the newest session a handshake through this context produced.
  SSL_SESSION* take_session_ref() const;  // caller must SSL_SESSION_free (or null)
  void remember_session(SSL_SESSION* s);  // takes a reference

 private:
  SslCtxPtr ctx_;
  std::string name_;
  bool name_is_ip_ = false;
  mutable std::mutex mu_;
  SslSessionPtr session_;
};

}  // namespace kib::relay
