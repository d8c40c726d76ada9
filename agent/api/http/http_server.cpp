#include "agent/api/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>

#include "agent/api/http/connection.h"
#include "agent/api/http/deadline_stream.h"
#include "agent/api/http/tcp_listener.h"
#include "agent/api/http/tls_stream.h"
#include "agent/common/errno_error.h"

namespace kib::api {
namespace {

void set_timeouts(int fd, std::chrono::seconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count());
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Time a TLS client has for each read of its handshake: a connection that never sends
// a ClientHello holds a slot this long, not api.idle_timeout.
constexpr std::chrono::seconds kTlsHandshakeTimeout{10};

// How long stop() waits for sessions to end their health Watch streams: a client that
// does not read its socket does not hold the agent's stop longer.
constexpr std::chrono::milliseconds kStopGrace{1000};

// A refused TLS handshake (a client certificate the CA does not vouch for): under TLS
// 1.3 the client has finished its side and sent its first request by then, and a
// close with that request unread is an RST, which throws away the alert that says why
// before the client reads it. So, as web servers close: FIN after the alert, then read
// and drop what the client still sends, until it closes or a second passes.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  set_timeouts(fd, std::chrono::seconds(1));
  char buf[4096];
  for (size_t dropped = 0; dropped < (64u << 10);) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

// The address a TCP peer connects from, without its port ("" when unknown).
std::string tcp_peer_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char host[INET6_ADDRSTRLEN] = {};
  const void* a = ss.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  return ::inet_ntop(ss.ss_family, a, host, sizeof host) ? host : "";
}

std::string unix_peer(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "unix:unknown";
  return "unix:uid=" + std::to_string(cred.uid) + ",pid=" + std::to_string(cred.pid);
}

}  // namespace

HttpServer::HttpServer(ApiConfig config, const HttpHandler& handler) : config_(std::move(config)), handler_(handler) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  // The certificates load before the socket opens: a bad one fails the start early.
  if (!config_.tls.listen.empty()) {
    tls_ = std::make_unique<TlsContextHolder>(config_.tls);
    if (auto st = tls_->load(); !st.ok()) return Error{st.error().code, "api.tls: " + st.error().message};
  }
  KIB_TRY_ASSIGN(auto unix_listener, UnixListener::open(config_));
  unix_.emplace(std::move(unix_listener));
  return start_accepting();
}

Status HttpServer::start(ApiListeners inherited) {
  unix_.emplace(UnixListener::adopt(config_, std::move(inherited.unix_socket), std::move(inherited.unix_lock)));
  // Without api.tls now, a handed-over TLS socket just closes.
  if (!config_.tls.listen.empty()) tls_listener_ = std::move(inherited.tls);
  return start_accepting();
}

Status HttpServer::start_accepting() {
  if (!wake_) wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return errno_error("eventfd");
  if (!config_.tls.listen.empty() && !tls_) {
    tls_ = std::make_unique<TlsContextHolder>(config_.tls);
    if (auto st = tls_->load(); !st.ok()) return Error{st.error().code, "api.tls: " + st.error().message};
  }
  if (tls_ && !tls_listener_) {
    KIB_TRY_ASSIGN(auto fd, open_tcp_listener(config_.tls.listen));
    tls_listener_ = std::move(fd);
  }
  acceptors_.emplace_back([this, fd = unix_->fd()] { accept_loop(fd, Kind::unix_socket); });
  if (tls_listener_) acceptors_.emplace_back([this, fd = tls_listener_.get()] { accept_loop(fd, Kind::tls); });
  return {};
}

Status HttpServer::reload_tls() {
  if (!tls_) return {};
  return tls_->load();
}

void HttpServer::accept_loop(int listen_fd, Kind kind) {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, 1000);  // the timeout also reaps finished connections
    reap_finished();
    if (n <= 0 || stopping_.load() || !(fds[0].revents & POLLIN)) continue;
    UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;  // EAGAIN, ECONNABORTED, EMFILE: try again on the next poll
    // Each listener has its own budget: whoever reaches the TLS port cannot use up the
    // operators' Unix socket, and one TLS peer address at most a share of its port's.
    const std::string peer = kind == Kind::tls ? tcp_peer_host(fd.get()) : std::string();
    const Load load = active_connections(kind, peer);
    if (load.listener >= config_.max_connections && shed_oldest_idle(kind)) {
      spdlog::info("api: {} at api.max_connections ({}): closed its longest idle connection for a new one",
                   kind == Kind::tls ? "TLS listener" : "Unix socket", load.listener);
    } else if (load.listener >= config_.max_connections) {
      spdlog::warn("api: refusing a connection on the {}: {} connections open (api.max_connections)",
                   kind == Kind::tls ? "TLS listener" : "Unix socket", load.listener);
      continue;  // closed by fd's destructor
    }
    if (kind == Kind::tls && load.peer >= max_per_tls_peer()) {
      spdlog::warn("api: refusing a TLS connection from {}: {} open from that address", peer, load.peer);
      continue;
    }
    spawn(std::move(fd), kind, peer);
  }
}

size_t HttpServer::max_per_tls_peer() const { return std::max<size_t>(1, config_.max_connections / 4); }

void HttpServer::spawn(UniqueFd fd, Kind kind, std::string peer) {
  set_timeouts(fd.get(), kind == Kind::tls ? kTlsHandshakeTimeout : config_.idle_timeout);
  auto w = std::make_unique<Worker>();
  w->fd = std::move(fd);
  w->kind = kind;
  w->peer = std::move(peer);
  if (auto waker = SessionWaker::create(); waker.ok())
    w->waker = std::move(*waker);
  else  // the connection is still served; only its health Watch streams are refused
    spdlog::warn("api: a connection without a waker: {}", waker.error().message);
  Worker& ref = *w;
  std::lock_guard lock(mu_);
  workers_.push_back(std::move(w));
  ref.thread = std::thread([this, &ref, kind] { serve(ref, kind); });
}

void HttpServer::serve(Worker& w, Kind kind) {
  const int fd = w.fd.get();
  auto limited = [&](ByteStream& s) {
    return DeadlineStream(s, fd, config_.idle_timeout, config_.request_timeout, w.idle_since_ms);
  };
  if (kind == Kind::unix_socket) {
    SocketStream stream(fd);
    DeadlineStream guarded = limited(stream);
    serve_connection(guarded, handler_, unix_peer(fd), w.waker);
  } else if (auto ctx = tls_->current()) {
    auto tls = TlsStream::accept(ctx.get(), fd);
    if (tls.ok()) {
      set_timeouts(fd, config_.idle_timeout);  // past the handshake's
      DeadlineStream guarded = limited(**tls);
      serve_connection(guarded, handler_, (*tls)->peer_subject(), w.waker);
    } else {
      spdlog::info("api: TLS client refused: {}", tls.error().message);
      if (tls.error().code != Code::deadline_exceeded) linger_close(fd);  // a silent one has nothing to read
    }
  }
  if (w.waker) w.waker->set_waiting_streams(0);  // its streams ended with it: stop() need not wait
  // Its slot is free before the peer sees the end: a client that reconnects at once is
  // not refused at api.max_connections for it. (The reaper joins this thread before it
  // closes the fd.)
  w.done.store(true);
  // The peer sees the end now; the fd itself is closed when the worker is reaped.
  ::shutdown(fd, SHUT_RDWR);
}

void HttpServer::reap_finished() {
  std::list<std::unique_ptr<Worker>> finished;
  {
    std::lock_guard lock(mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if ((*it)->done.load())
        finished.splice(finished.end(), workers_, it++);
      else
        ++it;
    }
  }
  for (auto& w : finished) w->thread.join();
}

// A connection waiting for its next request goes first, the one waiting longest:
// keep-alive lets a server close it, and a client that had sent nothing loses nothing.
bool HttpServer::shed_oldest_idle(Kind kind) {
  std::lock_guard lock(mu_);
  Worker* oldest = nullptr;
  int64_t since = 0;
  for (const auto& w : workers_) {
    const int64_t s = w->idle_since_ms.load(std::memory_order_relaxed);
    if (w->done.load() || w->kind != kind || s < 0 || w->shed) continue;
    if (oldest == nullptr || s < since) {
      oldest = w.get();
      since = s;
    }
  }
  if (oldest == nullptr) return false;
  oldest->shed = true;
  ::shutdown(oldest->fd.get(), SHUT_RDWR);
  return true;
}

HttpServer::Load HttpServer::active_connections(Kind kind, const std::string& peer) {
  std::lock_guard lock(mu_);
  Load load;
  for (const auto& w : workers_) {
    if (w->done.load() || w->kind != kind || w->shed) continue;
    ++load.listener;
    if (!peer.empty() && w->peer == peer) ++load.peer;
  }
  return load;
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  stop_connections(SHUT_RDWR);
  unix_.reset();
  tls_listener_.reset();
}

// Ends the accept loops, then every connection: SHUT_RDWR cuts them, SHUT_RD lets
// each finish the call it is serving (its next read sees the end).
void HttpServer::stop_connections(int how) {
  if (wake_) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
  }
  for (auto& t : acceptors_) t.join();
  acceptors_.clear();
  end_waiting_streams();
  {
    // Wakes every connection thread blocked in a read.
    std::lock_guard lock(mu_);
    for (auto& w : workers_) ::shutdown(w->fd.get(), how);
  }
  std::list<std::unique_ptr<Worker>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(workers_);
  }
  for (auto& w : all) w->thread.join();
}

void HttpServer::end_waiting_streams() {
  std::vector<std::shared_ptr<SessionWaker>> wakers;
  {
    std::lock_guard lock(mu_);
    for (auto& w : workers_)
      if (w->waker) wakers.push_back(w->waker);
  }
  for (auto& w : wakers) w->stop();
  // Each session sets its count of waiting streams before it waits again, after it
  // sent what the stop produced; a short poll of those counts, bounded by kStopGrace.
  const auto until = std::chrono::steady_clock::now() + kStopGrace;
  auto pending = [&] {
    return std::any_of(wakers.begin(), wakers.end(), [](const auto& w) { return w->waiting_streams() > 0; });
  };
  while (pending() && std::chrono::steady_clock::now() < until) ::poll(nullptr, 0, 10);
}

Result<ApiListeners> HttpServer::hand_over() {
  if (stopping_.exchange(true)) return Error{Code::failed_precondition, "the API server is stopped"};
  stop_connections(SHUT_RD);
  ApiListeners out;
  out.unix_socket = UniqueFd(::fcntl(unix_->fd(), F_DUPFD_CLOEXEC, 0));
  out.unix_lock = UniqueFd(::fcntl(unix_->lock_fd(), F_DUPFD_CLOEXEC, 0));
  if (tls_listener_) out.tls = UniqueFd(::fcntl(tls_listener_.get(), F_DUPFD_CLOEXEC, 0));
  if (!out.unix_socket || !out.unix_lock || (tls_listener_ && !out.tls)) return errno_error("dup an API socket");
  unix_->keep_socket_file();
  return out;
}

}  // namespace kib::api
