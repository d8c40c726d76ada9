#pragma once
// The API's HTTP server: an accept thread per listener (Unix socket, optional mTLS
// TCP) and a thread per connection, at most api.max_connections at once per listener,
// and on the TLS listener a quarter of that per client address (new ones over
// the cap are closed at once). Blocking I/O, api.idle_timeout per read (a TLS
// handshake: 10 s per read). Each connection has an eventfd its thread polls beside
// the socket (SessionWaker): another thread wakes it there, for a health Watch's
// readiness change or the server's stop, with no lock shared by the connections.
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "agent/api/http/http_message.h"
#include "agent/api/http/session_waker.h"
#include "agent/api/http/tls_context.h"
#include "agent/api/http/unix_listener.h"
#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/config/config.h"

namespace kib::api {

// The listening sockets one agent hands the next on take-over (daemon/handover.h).
struct ApiListeners {
  UniqueFd unix_socket;
  UniqueFd unix_lock;  // the flock that keeps a second agent off the socket
  UniqueFd tls;        // invalid without api.tls
};

class HttpServer {
 public:
  // handler must outlive the server.
  HttpServer(ApiConfig config, const HttpHandler& handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Opens the listeners and starts accepting. Errors say which listener failed.
  Status start();
  // start() on the sockets another agent handed over; a TLS socket missing from them
  // (the configuration gained api.tls) is opened.
  Status start(ApiListeners inherited);
  // Re-reads the TLS certificate, key and CA for new connections (SIGHUP); existing
  // connections keep theirs. On error the old context stays.
  Status reload_tls();
  // Stops accepting, closes every connection and joins every thread.
  void stop();
  // Take-over: stops accepting, lets every connection finish the call it is serving
  // (their reads end, their answers still go out), joins them and returns duplicates
  // of the listening sockets for the next agent. The sockets stay open (and the
  // socket file in place) until this server is destroyed, so that clients queue
  // instead of being refused.
  Result<ApiListeners> hand_over();

  const std::string& unix_socket_path() const { return config_.unix_socket; }

 private:
  enum class Kind { unix_socket, tls };
  struct Worker {
    UniqueFd fd;
    Kind kind = Kind::unix_socket;
    std::string peer;                     // TLS: the client's address
    std::shared_ptr<SessionWaker> waker;  // null if no eventfd could be had
    // Since when (DeadlineStream::now_ms) it waits for a request; -1 while it
    // receives or answers one.
    std::atomic<int64_t> idle_since_ms{-1};
    bool shed = false;  // closed for a new client; guarded by mu_
    std::thread thread;
    std::atomic<bool> done{false};
  };
  struct Load {
    size_t listener = 0;  // open connections of the listener
    size_t peer = 0;      // ... from the same address
  };

  Status start_accepting();
  void stop_connections(int how);
  // At stop: tells every session, and gives those with streams waiting for events (a
  // health Watch) up to kStopGrace to end them (unavailable) before the cut.
  void end_waiting_streams();
  void accept_loop(int listen_fd, Kind kind);
  void spawn(UniqueFd fd, Kind kind, std::string peer);
  size_t max_per_tls_peer() const;
  bool shed_oldest_idle(Kind kind);
  void serve(Worker& w, Kind kind);
  void reap_finished();
  Load active_connections(Kind kind, const std::string& peer);

  ApiConfig config_;
  const HttpHandler& handler_;
  std::optional<UnixListener> unix_;
  UniqueFd tls_listener_;
  std::unique_ptr<TlsContextHolder> tls_;
  UniqueFd wake_;  // eventfd: wakes the accept loops at stop
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> acceptors_;
  std::mutex mu_;
  std::list<std::unique_ptr<Worker>> workers_;
};

}  // namespace kib::api
