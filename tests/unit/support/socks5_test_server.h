#pragma once
// An in-process SOCKS5 server (RFC 1928/1929) for the event-loop unit tests: blocking
// sockets on threads of its own, listening on 127.0.0.1 at an ephemeral port, stopped
// and joined on destruction. Scripted per test: the method (none, user/pass with the
// credentials it accepts), how it answers (a reply code, no answer, a close, an RST),
// optionally inside TLS, and what the "destination" behind it does once CONNECT
// succeeded (the server plays the destination itself: echo, send and shut, RST, hold,
// bulk both ways). A UDP ASSOCIATE (plain) gets a relay on 127.0.0.1 that forwards
// to the destinations the datagrams name. It records what it saw, for the test to check.
#include <netinet/in.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kib::test {

struct Cert;

struct Socks5Script {
  enum class Handshake {
    answer,             // greeting, (auth), request: answered with `reply`
    close_at_greeting,  // reads the greeting, closes without answering
    rst_at_greeting,    // reads the greeting, resets
    stall,              // reads the greeting, never answers
    stall_request,      // answers the greeting (and auth), never the request
    none,               // no SOCKS5 at all: a plain destination (e.g. a TCP resolver)
  };
  enum class Then {
    echo,             // echoes until EOF, then shuts its side
    send_and_shut,    // sends `greeting_bytes`, shuts its side, reads until EOF
    reply_after_eof,  // reads until EOF, then sends `greeting_bytes` and shuts its side
    rst_after_read,   // reads at least one byte, then resets
    hold,             // reads until EOF, never writes
    bulk,             // sends bulk_bytes of a pattern while reading as many (checked), then shuts
    dns,              // DNS over TCP: answers each framed query (same ID, QR set, NOERROR, no records)
  };
  Handshake handshake = Handshake::answer;
  bool require_auth = false;  // offers only user/pass (method 2) and checks these
  std::string username;
  std::string password;
  uint8_t reply = 0;  // the CONNECT's reply code (0: succeeded)
  Then then = Then::echo;
  std::string greeting_bytes = "hello from upstream";
  size_t bulk_bytes = 0;
  const Cert* tls = nullptr;  // set: TLS on every accepted connection, with session resumption
};

// What the server saw, over all its connections.
struct Socks5Seen {
  int connections = 0;                // accepted
  int handshakes_done = 0;            // CONNECT answered with success
  int auth_failures = 0;              // wrong credentials
  int tls_resumed = 0;                // TLS handshakes that resumed a session
  int tls_full = 0;                   // full TLS handshakes
  std::vector<uint8_t> last_methods;  // methods the last greeting offered
  std::string last_destination;       // "ip:port" of the last request
  std::string received;               // bytes read after CONNECT (except bulk)
  bool peer_eof = false;              // the client's FIN reached the destination
  bool bulk_ok = false;               // bulk: every byte arrived and matched
  size_t bulk_received = 0;
  int dns_queries = 0;    // dns: framed queries answered
  int udp_datagrams = 0;  // UDP ASSOCIATE: client datagrams relayed to their destination
  int finished = 0;       // connections whose handling ended
};

class Socks5TestServer {
 public:
  explicit Socks5TestServer(Socks5Script script);
  ~Socks5TestServer();
  Socks5TestServer(const Socks5TestServer&) = delete;
  Socks5TestServer& operator=(const Socks5TestServer&) = delete;

  uint16_t port() const { return port_; }
  sockaddr_in address() const;
  Socks5Seen seen() const;
  // The bulk pattern's byte at offset i (both directions use it).
  static uint8_t pattern(size_t i) { return static_cast<uint8_t>((i * 131 + (i >> 12)) & 0xff); }

 private:
  void accept_loop();
  void serve(int fd);
  void relay_udp(int control, int udp);

  Socks5Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  SSL_CTX* ssl_ctx_ = nullptr;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  Socks5Seen seen_;
  std::vector<int> conn_fds_;  // open, for shutdown on stop
  std::vector<std::thread> conn_threads_;
  std::thread acceptor_;
};

}  // namespace kib::test
