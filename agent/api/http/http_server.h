#pragma once
// The API's HTTP server: an accept thread per listener (Unix socket, optional mTLS
// TCP) and a thread per connection, at most api.max_connections at once (new ones over
// the cap are closed at once). Blocking I/O, api.idle_timeout per read.
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "agent/api/http/http_message.h"
#include "agent/api/http/tls_context.h"
#include "agent/api/http/unix_listener.h"
#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/config/config.h"

namespace kib::api {

class HttpServer {
 public:
  // handler must outlive the server.
  HttpServer(ApiConfig config, const HttpHandler& handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Opens the listeners and starts accepting. Errors say which listener failed.
  Status start();
  // Re-reads the TLS certificate, key and CA for new connections (SIGHUP); existing
  // connections keep theirs. On error the old context stays.
  Status reload_tls();
  // Stops accepting, closes every connection and joins every thread.
  void stop();

  const std::string& unix_socket_path() const { return config_.unix_socket; }

 private:
  struct Worker {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  enum class Kind { unix_socket, tls };

  void accept_loop(int listen_fd, Kind kind);
  void spawn(UniqueFd fd, Kind kind);
  void serve(Worker& w, Kind kind);
  void reap_finished();
  size_t active_connections();

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
