#include "tests/unit/support/socks5_test_server.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "tests/unit/relay/tls_test_server.h"

namespace kib::test {

namespace {

// One accepted connection, plain or inside TLS, blocking.
struct Stream {
  int fd = -1;
  SSL* ssl = nullptr;

  // > 0: bytes; 0: EOF (or close_notify); < 0: error.
  ssize_t read_some(void* buf, size_t n) {
    if (ssl != nullptr) {
      int r = SSL_read(ssl, buf, static_cast<int>(n));
      if (r > 0) return r;
      return SSL_get_error(ssl, r) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
    }
    ssize_t r;
    do r = ::recv(fd, buf, n, 0);
    while (r < 0 && errno == EINTR);
    return r;
  }
  bool read_exact(void* buf, size_t n) {
    auto* p = static_cast<uint8_t*>(buf);
    while (n > 0) {
      ssize_t r = read_some(p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  bool write_all(const void* buf, size_t n) {
    auto* p = static_cast<const uint8_t*>(buf);
    while (n > 0) {
      ssize_t r;
      if (ssl != nullptr) {
        int w = SSL_write(ssl, p, static_cast<int>(n));
        r = w > 0 ? w : -1;
      } else {
        do r = ::send(fd, p, n, MSG_NOSIGNAL);
        while (r < 0 && errno == EINTR);
      }
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  bool write_all(const std::string& s) { return write_all(s.data(), s.size()); }
  void shut_write() {
    if (ssl != nullptr)
      SSL_shutdown(ssl);
    else
      ::shutdown(fd, SHUT_WR);
  }
};

void reset_on_close(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

}  // namespace

Socks5TestServer::Socks5TestServer(Socks5Script script) : script_(std::move(script)) {
  // OpenSSL's socket BIO writes with write(2): a client gone first must not kill the
  // test process (the plain paths send with MSG_NOSIGNAL).
  signal(SIGPIPE, SIG_IGN);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 64) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("socks5 test server: listen failed");
  port_ = ntohs(a.sin_port);
  if (script_.tls != nullptr) {
    ssl_ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(ssl_ctx_, script_.tls->cert);
    SSL_CTX_use_PrivateKey(ssl_ctx_, script_.tls->key);
    static const unsigned char kSid[] = "kib-socks5-test";
    SSL_CTX_set_session_id_context(ssl_ctx_, kSid, sizeof kSid - 1);
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

Socks5TestServer::~Socks5TestServer() {
  stop_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  acceptor_.join();
  {
    std::lock_guard lk(mu_);
    for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes blocked reads
  }
  for (auto& t : conn_threads_) t.join();
  ::close(listen_fd_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

sockaddr_in Socks5TestServer::address() const {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port_);
  return a;
}

Socks5Seen Socks5TestServer::seen() const {
  std::lock_guard lk(mu_);
  return seen_;
}

void Socks5TestServer::accept_loop() {
  while (!stop_.load()) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    std::lock_guard lk(mu_);
    if (stop_.load()) {
      ::close(fd);
      return;
    }
    ++seen_.connections;
    conn_fds_.push_back(fd);
    conn_threads_.emplace_back([this, fd] { serve(fd); });
  }
}

// UDP ASSOCIATE (plain control connection): relays datagrams between the client and
// the destinations their SOCKS5 UDP headers name (IPv4 only), until the control
// connection ends ("the association terminates when the TCP connection ... terminates").
void Socks5TestServer::relay_udp(int control, int udp) {
  sockaddr_in client{};
  bool have_client = false;
  uint8_t buf[65536];
  while (!stop_.load()) {
    pollfd p[2] = {{control, POLLIN, 0}, {udp, POLLIN, 0}};
    if (::poll(p, 2, 100) < 0) return;
    if (p[0].revents != 0) {
      ssize_t r = ::recv(control, buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN)) return;
    }
    if ((p[1].revents & POLLIN) == 0) continue;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    ssize_t n = ::recvfrom(udp, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    const bool from_client =
        !have_client || (from.sin_port == client.sin_port && from.sin_addr.s_addr == client.sin_addr.s_addr);
    if (from_client && n >= 10 && buf[0] == 0 && buf[1] == 0 && buf[2] == 0 && buf[3] == 1) {
      client = from;
      have_client = true;
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      std::memcpy(&dst.sin_addr, buf + 4, 4);
      std::memcpy(&dst.sin_port, buf + 8, 2);
      ::sendto(udp, buf + 10, static_cast<size_t>(n - 10), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst);
      std::lock_guard lk(mu_);
      ++seen_.udp_datagrams;
    } else if (have_client && !from_client) {
      // From a destination: wrapped in a header naming it, to the client.
      std::vector<uint8_t> out = {0, 0, 0, 1};
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&from.sin_addr), reinterpret_cast<uint8_t*>(&from.sin_addr) + 4);
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&from.sin_port), reinterpret_cast<uint8_t*>(&from.sin_port) + 2);
      out.insert(out.end(), buf, buf + n);
      ::sendto(udp, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&client), sizeof client);
    }
  }
}

void Socks5TestServer::serve(int fd) {
  Stream s{fd, nullptr};
  bool reset = false;
  auto done = [&] {
    if (s.ssl != nullptr) {
      SSL_set_shutdown(s.ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);  // keeps the session cached
      SSL_free(s.ssl);
    }
    std::lock_guard lk(mu_);
    ++seen_.finished;
    std::erase(conn_fds_, fd);
    if (reset) reset_on_close(fd);
    ::close(fd);
  };
  auto drain_until_eof = [&](bool record) {
    char buf[4096];
    for (;;) {
      ssize_t r = s.read_some(buf, sizeof buf);
      if (r <= 0) {
        std::lock_guard lk(mu_);
        if (r == 0) seen_.peer_eof = true;
        return;
      }
      if (record) {
        std::lock_guard lk(mu_);
        seen_.received.append(buf, static_cast<size_t>(r));
      }
    }
  };

  if (ssl_ctx_ != nullptr) {
    s.ssl = SSL_new(ssl_ctx_);
    SSL_set_fd(s.ssl, fd);
    if (SSL_accept(s.ssl) != 1) return done();
    std::lock_guard lk(mu_);
    ++(SSL_session_reused(s.ssl) ? seen_.tls_resumed : seen_.tls_full);
  }

  bool udp_associate = false;
  int udp = -1;  // UDP ASSOCIATE's relay socket
  // The SOCKS5 exchange; false: the connection ends here.
  auto socks = [&]() -> bool {
    // The greeting.
    uint8_t head[2];
    if (!s.read_exact(head, 2) || head[0] != 5) return false;
    std::vector<uint8_t> methods(head[1]);
    if (!s.read_exact(methods.data(), methods.size())) return false;
    {
      std::lock_guard lk(mu_);
      seen_.last_methods = methods;
    }
    switch (script_.handshake) {
      case Socks5Script::Handshake::close_at_greeting: return false;
      case Socks5Script::Handshake::rst_at_greeting: reset = true; return false;
      case Socks5Script::Handshake::stall: drain_until_eof(false); return false;
      default: break;
    }
    const uint8_t want = script_.require_auth ? 2 : 0;
    if (std::find(methods.begin(), methods.end(), want) == methods.end()) {
      s.write_all("\x05\xff", 2);
      return false;
    }
    const uint8_t chose[2] = {5, want};
    if (!s.write_all(chose, 2)) return false;
    if (script_.require_auth) {
      uint8_t v[2];
      if (!s.read_exact(v, 2) || v[0] != 1) return false;
      std::string user(v[1], '\0');
      uint8_t plen = 0;
      if (!s.read_exact(user.data(), user.size()) || !s.read_exact(&plen, 1)) return false;
      std::string pass(plen, '\0');
      if (!s.read_exact(pass.data(), pass.size())) return false;
      if (user != script_.username || pass != script_.password) {
        {
          std::lock_guard lk(mu_);
          ++seen_.auth_failures;
        }
        s.write_all("\x01\x01", 2);
        return false;
      }
      if (!s.write_all("\x01\x00", 2)) return false;
    }

    // The request.
    uint8_t req[4];
    if (!s.read_exact(req, 4) || req[0] != 5 || (req[1] != 1 && req[1] != 3)) return false;
    udp_associate = req[1] == 3;
    char text[INET6_ADDRSTRLEN] = "";
    uint8_t addr[16];
    if (req[3] == 1 || req[3] == 4) {
      const size_t n = req[3] == 1 ? 4 : 16;
      if (!s.read_exact(addr, n)) return false;
      inet_ntop(req[3] == 1 ? AF_INET : AF_INET6, addr, text, sizeof text);
    } else {
      return false;
    }
    uint8_t port[2];
    if (!s.read_exact(port, 2)) return false;
    {
      std::lock_guard lk(mu_);
      seen_.last_destination = (req[3] == 4 ? "[" + std::string(text) + "]" : std::string(text)) + ":" +
                               std::to_string(port[0] << 8 | port[1]);
    }
    if (script_.handshake == Socks5Script::Handshake::stall_request) {
      drain_until_eof(false);
      return false;
    }
    uint8_t reply[10] = {5, script_.reply, 0, 1, 127, 0, 0, 1, 0x04, 0x38};
    if (udp_associate && s.ssl == nullptr) {
      // The relay: a UDP socket on 127.0.0.1, named in the reply (BND.ADDR/PORT).
      udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (udp < 0 || ::bind(udp, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          getsockname(udp, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return false;
      std::memcpy(reply + 8, &a.sin_port, 2);
    }
    if (!s.write_all(reply, sizeof reply) || script_.reply != 0) return false;
    {
      std::lock_guard lk(mu_);
      ++seen_.handshakes_done;
    }
    return true;
  };
  const bool dialed = script_.handshake == Socks5Script::Handshake::none || socks();
  if (udp_associate && dialed && udp >= 0) relay_udp(fd, udp);
  if (udp >= 0) ::close(udp);
  if (!dialed || udp_associate) return done();

  // The destination.
  switch (script_.then) {
    case Socks5Script::Then::echo: {
      char buf[16384];
      for (;;) {
        ssize_t r = s.read_some(buf, sizeof buf);
        if (r <= 0) {
          std::lock_guard lk(mu_);
          if (r == 0) seen_.peer_eof = true;
          break;
        }
        {
          std::lock_guard lk(mu_);
          seen_.received.append(buf, static_cast<size_t>(r));
        }
        if (!s.write_all(buf, static_cast<size_t>(r))) break;
      }
      s.shut_write();
      // Waits for the client's close before closing (no RST for unread bytes).
      char c;
      while (s.read_some(&c, 1) > 0) {
      }
      return done();
    }
    case Socks5Script::Then::send_and_shut:
      s.write_all(script_.greeting_bytes);
      s.shut_write();
      drain_until_eof(true);
      return done();
    case Socks5Script::Then::reply_after_eof:
      drain_until_eof(true);
      s.write_all(script_.greeting_bytes);
      s.shut_write();
      return done();
    case Socks5Script::Then::rst_after_read: {
      char buf[4096];
      ssize_t r = s.read_some(buf, sizeof buf);
      if (r > 0) {
        std::lock_guard lk(mu_);
        seen_.received.append(buf, static_cast<size_t>(r));
      }
      reset = true;
      return done();
    }
    case Socks5Script::Then::hold: drain_until_eof(true); return done();
    case Socks5Script::Then::dns: {
      for (;;) {
        uint8_t len[2];
        if (!s.read_exact(len, 2)) break;
        std::string q(static_cast<size_t>(len[0] << 8 | len[1]), '\0');
        if (!s.read_exact(q.data(), q.size()) || q.size() < 12) break;
        q[2] = static_cast<char>(q[2] | 0x80);                       // QR
        q[3] = static_cast<char>(0x80);                              // RA, NOERROR
        for (int i = 6; i < 12; ++i) q[static_cast<size_t>(i)] = 0;  // no records
        const uint8_t out_len[2] = {len[0], len[1]};
        if (!s.write_all(out_len, 2) || !s.write_all(q)) break;
        std::lock_guard lk(mu_);
        ++seen_.dns_queries;
      }
      return done();
    }
    case Socks5Script::Then::bulk: break;
  }

  // Bulk, plain only: sends bulk_bytes of the pattern while reading as many back.
  const size_t total = script_.bulk_bytes;
  size_t sent = 0, got = 0;
  bool ok = true, eof = false;
  std::vector<uint8_t> out(65536), in(65536);
  while (!stop_.load() && (sent < total || !eof)) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < total ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) < 0) break;
    if (p.revents & POLLOUT) {
      const size_t n = std::min(out.size(), total - sent);
      for (size_t i = 0; i < n; ++i) out[i] = pattern(sent + i);
      ssize_t w = ::send(fd, out.data(), n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0)
        sent += static_cast<size_t>(w);
      else if (w < 0 && errno != EAGAIN)
        break;
      if (sent == total) ::shutdown(fd, SHUT_WR);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::recv(fd, in.data(), in.size(), MSG_DONTWAIT);
      if (r == 0) {
        eof = true;
      } else if (r > 0) {
        for (ssize_t i = 0; i < r; ++i) ok = ok && in[static_cast<size_t>(i)] == pattern(got + static_cast<size_t>(i));
        got += static_cast<size_t>(r);
      } else if (errno != EAGAIN) {
        break;
      }
    }
  }
  {
    std::lock_guard lk(mu_);
    seen_.bulk_received = got;
    seen_.bulk_ok = ok && got == total;
    seen_.peer_eof = eof;
  }
  return done();
}

}  // namespace kib::test
