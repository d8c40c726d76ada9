// TlsSession against an in-process OpenSSL server on memory BIOs:
// verification against ca_cert, the name check, IP literals, data both ways, close,
// and resumption within one TlsClientContext (one Egress revision).
#include <doctest/doctest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <stdlib.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/relay/tls_context.h"
#include "agent/relay/tls_session.h"
#include "tests/unit/relay/tls_test_server.h"

using kib::relay::TlsClientContext;
using kib::relay::TlsSession;
using Io = TlsSession::Io;
using kib::test::Cert;
using kib::test::make_cert;
using kib::test::Server;

namespace {

// Moves ciphertext both ways until neither side has anything to say.
void pump(TlsSession& client, Server& server) {
  for (int i = 0; i < 50; ++i) {
    uint8_t buf[16384];
    bool moved = false;
    while (size_t n = client.take_out(buf, sizeof buf)) {
      BIO_write(server.in(), buf, static_cast<int>(n));
      moved = true;
    }
    SSL_do_handshake(server.ssl());
    int n;
    while ((n = BIO_read(server.out(), buf, sizeof buf)) > 0) {
      client.feed(buf, static_cast<size_t>(n));
      moved = true;
    }
    Io io = client.handshake();
    if (!moved && io != Io::want_read) return;
    if (!moved) return;
  }
}

// TLS 1.3 tickets come after the handshake: a read on the client takes them in.
void take_tickets(TlsSession& client, Server& server) {
  SSL_write(server.ssl(), "x", 1);
  pump(client, server);
  uint8_t buf[8];
  size_t n = 0;
  (void)client.read(buf, sizeof buf, &n);
}

Io handshake(TlsSession& client, Server& server) {
  Io io = client.handshake();
  for (int i = 0; i < 20 && io == Io::want_read; ++i) {
    pump(client, server);
    io = client.handshake();
  }
  return io;
}

}  // namespace

TEST_CASE("a certificate chaining to ca_cert with a matching name is accepted; data flows both ways") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  REQUIRE(ctx.ok());
  auto s = TlsSession::create(*ctx);
  REQUIRE(s.ok());
  Server server(*cert);
  REQUIRE(handshake(**s, server) == Io::ok);

  const std::string hello = "hello server";
  REQUIRE((*s)->write(reinterpret_cast<const uint8_t*>(hello.data()), hello.size()) == Io::ok);
  pump(**s, server);
  char got[64] = {};
  CHECK(SSL_read(server.ssl(), got, sizeof got) == static_cast<int>(hello.size()));
  CHECK(std::string(got) == hello);

  SSL_write(server.ssl(), "hi client", 9);
  pump(**s, server);
  uint8_t back[64];
  size_t n = 0;
  REQUIRE((*s)->read(back, sizeof back, &n) == Io::ok);
  CHECK(std::string(reinterpret_cast<char*>(back), n) == "hi client");
}

TEST_CASE("a certificate not chaining to ca_cert is refused") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto other = make_cert("other CA", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", other->pem);
  REQUIRE(ctx.ok());
  auto s = TlsSession::create(*ctx);
  Server server(*cert);
  CHECK(handshake(**s, server) == Io::error);
  CHECK((*s)->last_error().find("verify") != std::string::npos);
}

// Stand-in system trust roots: SSL_CTX_set_default_verify_paths reads the file named by
// SSL_CERT_FILE and the directory named by SSL_CERT_DIR, so a test can say what the
// "system" trusts without depending on (or touching) the host's store.
class FakeSystemRoots {
 public:
  explicit FakeSystemRoots(const std::string& pem) {
    char tmpl[] = "/tmp/kibotos-roots-XXXXXX";
    char* p = ::mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    dir_ = p;
    std::filesystem::create_directory(dir_ + "/certs");
    std::ofstream(dir_ + "/roots.pem") << pem;
    save("SSL_CERT_FILE", dir_ + "/roots.pem");
    save("SSL_CERT_DIR", dir_ + "/certs");  // empty: nothing from the host's directory
  }
  ~FakeSystemRoots() {
    for (const auto& [name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  void save(const std::string& name, const std::string& value) {
    const char* old = ::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::string dir_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_CASE("ca_cert replaces the system trust roots: the context trusts the given certificates only") {
  auto system_root = make_cert("system root", "DNS:socks.test");
  auto given1 = make_cert("given CA 1", "DNS:other.test");
  auto given2 = make_cert("given CA 2", "DNS:other.test");
  FakeSystemRoots roots(system_root->pem);
  {
    // Without ca_cert the system roots apply, and here they trust system_root.
    auto ctx = TlsClientContext::create("socks.test", "");
    REQUIRE(ctx.ok());
    auto s = TlsSession::create(*ctx);
    REQUIRE(s.ok());
    Server server(*system_root);
    REQUIRE(handshake(**s, server) == Io::ok);
  }
  auto ctx = TlsClientContext::create("socks.test", given1->pem + given2->pem);
  REQUIRE(ctx.ok());
  // The trust store holds exactly the given certificates: no system root beside them.
  X509_STORE* store = SSL_CTX_get_cert_store((*ctx)->get());
  REQUIRE(store != nullptr);
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  std::vector<X509*> trusted;
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    X509_OBJECT* o = sk_X509_OBJECT_value(objects, i);
    CHECK(X509_OBJECT_get_type(o) == X509_LU_X509);  // no CRL either
    if (X509* c = X509_OBJECT_get0_X509(o)) trusted.push_back(c);
  }
  CHECK(trusted.size() == 2);
  auto holds = [&](X509* c) {
    for (X509* t : trusted)
      if (X509_cmp(t, c) == 0) return true;
    return false;
  };
  CHECK(holds(given1->cert));
  CHECK(holds(given2->cert));
  CHECK_FALSE(holds(system_root->cert));
  // And a server the system roots would accept is refused.
  auto s = TlsSession::create(*ctx);
  REQUIRE(s.ok());
  Server server(*system_root);
  CHECK(handshake(**s, server) == Io::error);
  CHECK((*s)->last_error().find("verify") != std::string::npos);
}

TEST_CASE("a name the certificate does not carry is refused") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("wrong.test", cert->pem);
  auto s = TlsSession::create(*ctx);
  Server server(*cert);
  CHECK(handshake(**s, server) == Io::error);
}

TEST_CASE("an IP literal is verified against the certificate's IP SAN") {
  auto cert = make_cert("ip", "IP:10.9.8.7");
  {
    auto ctx = TlsClientContext::create("10.9.8.7", cert->pem);
    auto s = TlsSession::create(*ctx);
    Server server(*cert);
    CHECK(handshake(**s, server) == Io::ok);
  }
  {
    auto ctx = TlsClientContext::create("10.9.8.6", cert->pem);
    auto s = TlsSession::create(*ctx);
    Server server(*cert);
    CHECK(handshake(**s, server) == Io::error);
  }
}

TEST_CASE("a ca_cert without a PEM certificate is invalid_argument") {
  auto ctx = TlsClientContext::create("x.test", "not a pem");
  CHECK(!ctx.ok());
}

TEST_CASE("released after a burst, the session's buffers hold no spare capacity, and the connection goes on") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  auto s = TlsSession::create(*ctx);
  Server server(*cert);
  REQUIRE(handshake(**s, server) == Io::ok);
  take_tickets(**s, server);
  // 64 KiB each way: four full records queue in each direction's buffer at once.
  const std::string up(64 * 1024, 'u');
  REQUIRE((*s)->write(reinterpret_cast<const uint8_t*>(up.data()), up.size()) == Io::ok);
  CHECK((*s)->bio_capacity() >= up.size());
  pump(**s, server);
  std::string at_server(up.size(), '\0');
  size_t got = 0;
  REQUIRE(SSL_read_ex(server.ssl(), at_server.data(), at_server.size(), &got) == 1);
  while (got < up.size()) {
    size_t more = 0;
    REQUIRE(SSL_read_ex(server.ssl(), at_server.data() + got, at_server.size() - got, &more) == 1);
    got += more;
  }
  CHECK(at_server == up);
  const std::string down(64 * 1024, 'd');
  REQUIRE(SSL_write(server.ssl(), down.data(), static_cast<int>(down.size())) == static_cast<int>(down.size()));
  pump(**s, server);
  std::string at_client;
  uint8_t buf[16384];
  size_t n = 0;
  Io io;
  while ((io = (*s)->read(buf, sizeof buf, &n)) == Io::ok) at_client.append(reinterpret_cast<char*>(buf), n);
  CHECK(io == Io::want_read);
  CHECK(at_client == down);
  // Drained, the buffers keep the burst's capacity (no regrowth per burst) until the
  // release, which leaves them empty.
  CHECK((*s)->bio_capacity() >= up.size());
  (*s)->release_spare_buffers();
  CHECK((*s)->bio_capacity() == 0);
  // The emptied buffers carry the next exchange.
  REQUIRE((*s)->write(reinterpret_cast<const uint8_t*>("again"), 5) == Io::ok);
  pump(**s, server);
  char small[16] = {};
  CHECK(SSL_read(server.ssl(), small, sizeof small) == 5);
  CHECK(std::string(small) == "again");
  SSL_write(server.ssl(), "back", 4);
  pump(**s, server);
  REQUIRE((*s)->read(buf, sizeof buf, &n) == Io::ok);
  CHECK(std::string(reinterpret_cast<char*>(buf), n) == "back");
}

TEST_CASE("close_notify from the server reads as closed") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  auto s = TlsSession::create(*ctx);
  Server server(*cert);
  REQUIRE(handshake(**s, server) == Io::ok);
  SSL_shutdown(server.ssl());
  pump(**s, server);
  uint8_t buf[64];
  size_t n = 0;
  CHECK((*s)->read(buf, sizeof buf, &n) == Io::closed);
}

// A session through a context of its own, its handshake with server done and the
// server's tickets taken in.
std::unique_ptr<TlsSession> connected(const Cert& cert, Server& server) {
  auto ctx = TlsClientContext::create("socks.test", cert.pem);
  REQUIRE(ctx.ok());
  auto s = TlsSession::create(*ctx);
  REQUIRE(s.ok());
  REQUIRE(handshake(**s, server) == Io::ok);
  take_tickets(**s, server);
  return std::move(*s);
}

TEST_CASE("a read takes every buffered record that fits; the end after them comes with the next read") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  Server server(*cert);
  auto s = connected(*cert, server);
  // Three records, then close_notify, all buffered at once.
  for (const char* part : {"one;", "two;", "three"}) SSL_write(server.ssl(), part, static_cast<int>(strlen(part)));
  SSL_shutdown(server.ssl());
  pump(*s, server);
  uint8_t buf[64];
  size_t n = 0;
  REQUIRE(s->read(buf, sizeof buf, &n) == Io::ok);
  CHECK(std::string(reinterpret_cast<char*>(buf), n) == "one;two;three");
  CHECK(s->read(buf, sizeof buf, &n) == Io::closed);
  CHECK(n == 0);
  CHECK(s->read(buf, sizeof buf, &n) == Io::closed);
}

TEST_CASE("a read stops at its buffer's end; the rest of the record comes with the next read") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  Server server(*cert);
  auto s = connected(*cert, server);
  SSL_write(server.ssl(), "abcdef", 6);
  SSL_write(server.ssl(), "ghij", 4);
  pump(*s, server);
  uint8_t buf[4];
  size_t n = 0;
  std::string got;
  Io io;
  while ((io = s->read(buf, sizeof buf, &n)) == Io::ok) {
    CHECK(n == std::min<size_t>(4, 10 - got.size()));
    got.append(reinterpret_cast<char*>(buf), n);
  }
  CHECK(io == Io::want_read);
  CHECK(got == "abcdefghij");
}

TEST_CASE("a second connection through the same revision resumes the session") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX_set_session_id_context(server_ctx, reinterpret_cast<const unsigned char*>("t"), 1);
  for (int i = 0; i < 2; ++i) {
    auto s = TlsSession::create(*ctx);
    Server server(*cert, server_ctx);
    REQUIRE(handshake(**s, server) == Io::ok);
    take_tickets(**s, server);
    CHECK((*s)->resumed() == (i == 1));
  }
  SSL_CTX_free(server_ctx);
}

SSL_CTX* resuming_server(int max_version = 0) {
  SSL_CTX* c = SSL_CTX_new(TLS_server_method());
  SSL_CTX_set_session_id_context(c, reinterpret_cast<const unsigned char*>("t"), 1);
  if (max_version != 0) SSL_CTX_set_max_proto_version(c, max_version);
  return c;
}

// One dial through the revision's context to a new connection of server_ctx,
// handshake done.
struct Dial {
  std::unique_ptr<TlsSession> client;
  std::unique_ptr<Server> server;
  bool resumed() const { return client->resumed(); }
  void take_tickets() { ::take_tickets(*client, *server); }
};

// A dial whose ClientHello is out (its session offered, or none), not answered yet.
Dial start_dial(const std::shared_ptr<TlsClientContext>& ctx, const Cert& cert, SSL_CTX* server_ctx) {
  auto s = TlsSession::create(ctx);
  REQUIRE(s.ok());
  Dial d{std::move(s.value()), std::make_unique<Server>(cert, server_ctx)};
  REQUIRE(d.client->handshake() == Io::want_read);
  return d;
}

Dial dial(const std::shared_ptr<TlsClientContext>& ctx, const Cert& cert, SSL_CTX* server_ctx) {
  Dial d = start_dial(ctx, cert, server_ctx);
  REQUIRE(handshake(*d.client, *d.server) == Io::ok);
  return d;
}

// OpenSSL's client marks a TLS 1.3 session unresumable once a handshake resumed it
// (RFC 8446 C.4: a ticket is for one connection). Dials that come after a resumption
// completed and before its new ticket is read in still resume: each got its own copy
// of the shared ticket, so the resumption spent only its copy. With one shared
// object, whether such a dial resumed depended on timing (under load, some of every
// burst paid a full handshake).
TEST_CASE("a dial after the last ticket's resumption completed, before a new ticket came, still resumes") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  REQUIRE(ctx.ok());
  SSL_CTX* server_ctx = resuming_server();
  {
    Dial first = dial(*ctx, *cert, server_ctx);
    first.take_tickets();  // two tickets
    CHECK(!first.resumed());
  }
  Dial b = dial(*ctx, *cert, server_ctx);
  CHECK(b.resumed());
  Dial c = dial(*ctx, *cert, server_ctx);  // the other ticket
  CHECK(c.resumed());
  // Both handed out and resumed, no new ticket read in: the last one is shared.
  CHECK(dial(*ctx, *cert, server_ctx).resumed());
  CHECK(dial(*ctx, *cert, server_ctx).resumed());
  SSL_CTX_free(server_ctx);
}

TEST_CASE("out of TLS 1.3 tickets, dials started together share the last one and all resume") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  REQUIRE(ctx.ok());
  SSL_CTX* server_ctx = resuming_server();  // stateless tickets: a second use is taken
  {
    Dial first = dial(*ctx, *cert, server_ctx);
    first.take_tickets();  // two tickets
  }
  // Four dials start before any handshake completes: two get a ticket each, the
  // other two share the one handed out last (not spent yet).
  std::vector<Dial> burst;
  for (int i = 0; i < 4; ++i) burst.push_back(start_dial(*ctx, *cert, server_ctx));
  for (Dial& d : burst) {
    REQUIRE(handshake(*d.client, *d.server) == Io::ok);
    CHECK(d.resumed());
  }
  SSL_CTX_free(server_ctx);
}

TEST_CASE("a TLS 1.2 session is reused by every dial through the revision") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  REQUIRE(ctx.ok());
  SSL_CTX* server_ctx = resuming_server(TLS1_2_VERSION);
  for (int i = 0; i < 3; ++i) CHECK(dial(*ctx, *cert, server_ctx).resumed() == (i > 0));
  SSL_CTX_free(server_ctx);
}

std::string id_of(const SSL_SESSION* s) {
  unsigned int len = 0;
  const unsigned char* id = SSL_SESSION_get_id(s, &len);
  return std::string(reinterpret_cast<const char*>(id), len);
}

TEST_CASE("the session pool hands out the newest usable session, then shares the last, and keeps kMaxSessions") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  auto ctx = TlsClientContext::create("socks.test", cert->pem);
  REQUIRE(ctx.ok());
  TlsClientContext& pool = **ctx;
  // A TLS 1.3 session with id n (none: not resumable), created age_s ago.
  auto tls13 = [](long age_s, int n) {
    SSL_SESSION* s = SSL_SESSION_new();
    SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION);
    const unsigned char id[] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8), 7};
    if (n >= 0) SSL_SESSION_set1_id(s, id, sizeof id);
    SSL_SESSION_set_time(s, static_cast<long>(time(nullptr)) - age_s);
    SSL_SESSION_set_timeout(s, 300);
    return s;
  };
  // Takes the next session: its id, and whether it is the caller's own copy.
  auto take = [&pool](const std::vector<SSL_SESSION*>& kept) {
    SSL_SESSION* s = pool.take_session_ref();
    REQUIRE(s != nullptr);
    for (SSL_SESSION* k : kept) CHECK(s != k);  // a copy: a resumption spends only it
    std::string id = id_of(s);
    SSL_SESSION_free(s);
    return id;
  };
  SSL_SESSION* live = tls13(0, 1);
  SSL_SESSION* expired = tls13(1000, 2);
  SSL_SESSION* spent = tls13(0, -1);
  pool.remember_session(live);
  pool.remember_session(expired);  // newer, but past its lifetime
  pool.remember_session(spent);    // newest, but no longer resumable
  CHECK(take({live}) == id_of(live));
  // Out of tickets: the one handed out last, shared, while it is usable.
  CHECK(take({live}) == id_of(live));
  CHECK(take({live}) == id_of(live));
  SSL_SESSION_set_time(live, static_cast<long>(time(nullptr)) - 1000);
  CHECK(pool.take_session_ref() == nullptr);
  for (SSL_SESSION* s : {live, expired, spent}) SSL_SESSION_free(s);

  std::vector<SSL_SESSION*> all;
  for (size_t i = 0; i < TlsClientContext::kMaxSessions + 5; ++i) {
    all.push_back(tls13(0, static_cast<int>(i)));
    pool.remember_session(all.back());
  }
  for (size_t i = 0; i < TlsClientContext::kMaxSessions; ++i)
    CHECK(take(all) == id_of(all[all.size() - 1 - i]));  // newest first, each once
  // The five oldest were dropped: next comes the last one handed out, shared.
  CHECK(take(all) == id_of(all[all.size() - TlsClientContext::kMaxSessions]));
  for (SSL_SESSION* s : all) SSL_SESSION_free(s);
}

TEST_CASE("trust stores: one for the system roots and one per distinct ca_cert, shared by every context") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  const std::string ca = cert->pem;
  auto sys1 = TlsClientContext::create("a.test", "").value();
  auto sys2 = TlsClientContext::create("b.test", "").value();
  auto ca1 = TlsClientContext::create("socks.test", ca).value();
  auto ca2 = TlsClientContext::create("socks.test", std::string(ca)).value();
  CHECK(SSL_CTX_get_cert_store(sys1->get()) == SSL_CTX_get_cert_store(sys2->get()));
  CHECK(SSL_CTX_get_cert_store(ca1->get()) == SSL_CTX_get_cert_store(ca2->get()));
  CHECK(SSL_CTX_get_cert_store(ca1->get()) != SSL_CTX_get_cert_store(sys1->get()));
  // Still verifies against its own roots only: a handshake through the shared store
  // is covered by the resumption cases above; a bad PEM is still refused.
  auto bad = TlsClientContext::create("socks.test", "not a certificate");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == kib::Code::invalid_argument);
}

// What the server has sealed for the client, as the socket would deliver it.
std::string server_ciphertext(Server& server) {
  std::string wire;
  char buf[16384];
  int n;
  while ((n = BIO_read(server.out(), buf, sizeof buf)) > 0) wire.append(buf, static_cast<size_t>(n));
  return wire;
}

TEST_CASE("ciphertext lent in pieces of any size opens to the same plaintext; only a record's tail is kept") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  Server server(*cert);
  auto s = connected(*cert, server);
  s->release_spare_buffers();
  std::string sent;
  for (int i = 0; i < 6; ++i) sent += std::string(5000 + 997 * static_cast<size_t>(i), static_cast<char>('a' + i));
  REQUIRE(SSL_write(server.ssl(), sent.data(), static_cast<int>(sent.size())) == static_cast<int>(sent.size()));
  const std::string wire = server_ciphertext(server);
  std::string got;
  size_t at = 0;
  for (size_t piece : {1, 4, 5, 700, 16384, 3, 20000, 9999, 100000}) {
    // Lent from a buffer that is overwritten once the loan ends, as a provided buffer is.
    std::string buffer = wire.substr(at, piece);
    at += buffer.size();
    s->lend(reinterpret_cast<const uint8_t*>(buffer.data()), buffer.size());
    uint8_t plain[16384];
    size_t n = 0;
    while (s->read(plain, sizeof plain, &n) == Io::ok) got.append(reinterpret_cast<char*>(plain), n);
    s->end_loan();
    buffer.assign(buffer.size(), '\0');
    // At most one record's unread rest is copied, never a whole loan of records.
    CHECK(s->bio_capacity() <= 16384 + 256 + 20000);
  }
  REQUIRE(at == wire.size());
  CHECK(got == sent);
}

TEST_CASE("ciphertext is sent in place: what next_out() handed out stays put while the session writes on") {
  auto cert = make_cert("socks.test", "DNS:socks.test");
  Server server(*cert);
  auto s = connected(*cert, server);
  const std::string first(3000, 'f');
  const std::string second(50000, 's');
  REQUIRE(s->write(reinterpret_cast<const uint8_t*>(first.data()), first.size()) == Io::ok);
  const std::span<uint8_t> in_flight = s->next_out();
  REQUIRE(!in_flight.empty());
  const std::string copy(reinterpret_cast<const char*>(in_flight.data()), in_flight.size());
  REQUIRE(s->write(reinterpret_cast<const uint8_t*>(second.data()), second.size()) == Io::ok);
  CHECK(std::string(reinterpret_cast<const char*>(in_flight.data()), in_flight.size()) == copy);
  CHECK(s->pending_out() > in_flight.size() + second.size());
  // "Sent" in two partial sends, then the rest as the next spans come.
  std::string wire(reinterpret_cast<const char*>(in_flight.data()), in_flight.size());
  s->consume_out(in_flight.size() / 2);
  s->consume_out(in_flight.size() - in_flight.size() / 2);
  while (s->pending_out() > 0) {
    const std::span<uint8_t> next = s->next_out();
    wire.append(reinterpret_cast<const char*>(next.data()), next.size());
    s->consume_out(next.size());
  }
  BIO_write(server.in(), wire.data(), static_cast<int>(wire.size()));
  std::string at_server(first.size() + second.size(), '\0');
  size_t got = 0;
  while (got < at_server.size()) {
    size_t n = 0;
    REQUIRE(SSL_read_ex(server.ssl(), at_server.data() + got, at_server.size() - got, &n) == 1);
    got += n;
  }
  CHECK(at_server == first + second);
}
