#pragma once
// The client SSL_CTX of one Egress revision: built once when the revision is
// published (not per connection), shared by every connection dialing through it.
// It also keeps the revision's sessions for resumption within the revision.
#include <openssl/ssl.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "agent/common/openssl_ptr.h"
#include "agent/common/result.h"

namespace kib::relay {

// The trust of Egress endpoints, shared: one X509_STORE for the system roots (ca_pem
// empty) and one per distinct ca_cert, alive while a context uses it. Loading the
// system bundle costs ~850 KiB and tens of milliseconds, once instead of per Egress
// revision.
Result<std::shared_ptr<X509_STORE>> shared_trust_store(const std::string& ca_pem);

class TlsClientContext {
 public:
  // server_name: EgressTls.server_name, or the endpoint host when empty. ca_pem: the
  // Egress's ca_cert (replaces the system roots) or empty for the system roots.
  static Result<std::shared_ptr<TlsClientContext>> create(const std::string& server_name, const std::string& ca_pem);
  SSL_CTX* get() const { return ctx_.get(); }
  const std::string& verify_name() const { return name_; }
  bool name_is_ip() const { return name_is_ip_; }

  // Resumption: the newest resumable, unexpired session handshakes through this
  // context produced (caller must SSL_SESSION_free it), or null. A TLS 1.3 ticket is
  // handed out once while there are others: a ticket is for one connection (RFC 8446
  // C.4; it would link them). Out of fresh tickets, dials share the one handed out
  // last, each getting its own copy: OpenSSL marks the session a handshake resumed
  // spent, so with one shared object a dial that started after the first resumption
  // of a burst completed, and before its new ticket was read in, paid a full
  // handshake (timing-dependent: under load, some dials of every burst did). Servers
  // with reusable tickets take the shared one; others answer with a full handshake,
  // which is what offering nothing costs. A TLS 1.2 session stays and is reused.
  SSL_SESSION* take_session_ref();
  void remember_session(SSL_SESSION* s);  // takes a reference

  // Sessions kept: enough for the dials a loop starts before their tickets arrive
  // (each full handshake brings two from OpenSSL servers, each resumption one).
  static constexpr size_t kMaxSessions = 64;

 private:
  std::shared_ptr<X509_STORE> trust_;  // declared first: the SSL_CTX goes before it
  SslCtxPtr ctx_;
  std::string name_;
  bool name_is_ip_ = false;
  std::mutex mu_;
  std::deque<SslSessionPtr> sessions_;  // oldest first
  SslSessionPtr last_ticket_;           // the TLS 1.3 ticket handed out last
};

}  // namespace kib::relay
