#include "netns/transparent_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "agent/common/errno_error.h"
#include "netns/inherited_listeners.h"
#include "netns/namespace_handle.h"

namespace kib::netns {
namespace {

constexpr int kPortAttempts = 16;

Status set_int(int fd, int level, int opt, const char* name) {
  int one = 1;
  if (::setsockopt(fd, level, opt, &one, sizeof one) != 0) return errno_error(std::string("setsockopt ") + name);
  return {};
}

Status make_transparent(int fd, int family, Transport transport) {
  if (family == AF_INET) {
    KIB_TRY(set_int(fd, SOL_IP, IP_TRANSPARENT, "IP_TRANSPARENT"));
    if (transport == Transport::udp) KIB_TRY(set_int(fd, SOL_IP, IP_RECVORIGDSTADDR, "IP_RECVORIGDSTADDR"));
    return {};
  }
  KIB_TRY(set_int(fd, SOL_IPV6, IPV6_V6ONLY, "IPV6_V6ONLY"));
  KIB_TRY(set_int(fd, SOL_IPV6, IPV6_TRANSPARENT, "IPV6_TRANSPARENT"));
  if (transport == Transport::udp) KIB_TRY(set_int(fd, SOL_IPV6, IPV6_RECVORIGDSTADDR, "IPV6_RECVORIGDSTADDR"));
  return {};
}

Result<uint16_t> bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return errno_error("getsockname");
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

Status set_congestion_control(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) != 0)
    return errno_error("setsockopt TCP_CONGESTION " + name, errno, Code::invalid_argument);
  return {};
}

// One socket on the wildcard address of `family`; port 0 lets the kernel choose.
Result<UniqueFd> open_one(int family, Transport transport, uint16_t port, const std::string& cc) {
  int type = (transport == Transport::tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC | SOCK_NONBLOCK;
  UniqueFd fd(::socket(family, type, 0));
  if (!fd) {
    int err = errno;
    // unimplemented: open_set goes on without this family.
    return errno_error(std::string("socket ") + (family == AF_INET ? "ipv4" : "ipv6"), err,
                       err == EAFNOSUPPORT ? Code::unimplemented : Code::internal);
  }
  KIB_TRY(set_int(fd.get(), SOL_SOCKET, SO_REUSEPORT, "SO_REUSEPORT"));
  KIB_TRY(make_transparent(fd.get(), family, transport));
  if (transport == Transport::tcp) {
    // Accepted guest sockets inherit both. TCP_NODELAY: a relay must not hold a small
    // write for the guest's delayed ACK (Nagle; up to 40 ms per write); sends that
    // know more is queued say so with MSG_MORE instead.
    KIB_TRY(set_int(fd.get(), IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY"));
    if (!cc.empty()) KIB_TRY(set_congestion_control(fd.get(), cc));
  }
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_ANY);
    sin->sin_port = htons(port);
    len = sizeof *sin;
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_any;
    sin6->sin6_port = htons(port);
    len = sizeof *sin6;
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    int err = errno;
    return errno_error("bind transparent socket", err, err == EADDRINUSE ? Code::aborted : Code::internal);
  }
  if (transport == Transport::tcp && ::listen(fd.get(), SOMAXCONN) != 0) return errno_error("listen");
  return fd;
}

// A TCP listener the previous agent passed on (take-over) when there is one for the
// port, else a new one.
Result<UniqueFd> reuse_or_open(int family, Transport transport, uint16_t port, const std::string& cc) {
  if (transport == Transport::tcp && port != 0)
    if (auto fd = take_inherited_listener(family, port)) return std::move(*fd);
  return open_one(family, transport, port, cc);
}

Result<ListenerSet> open_set(Transport transport, unsigned count, const std::string& cc, uint16_t port) {
  auto first = reuse_or_open(AF_INET, transport, port, cc);
  if (!first.ok()) return std::move(first).error();
  auto bound = bound_port(first->get());
  if (!bound.ok()) return std::move(bound).error();
  ListenerSet set;
  set.port = *bound;
  set.v4.push_back(std::move(*first));
  for (unsigned i = 0; i < 2 * count - 1; ++i) {
    int family = i + 1 < count ? AF_INET : AF_INET6;
    auto s = reuse_or_open(family, transport, set.port, cc);
    // A kernel without IPv6 (ipv6.disable=1) carries none: nothing to intercept.
    if (!s.ok() && family == AF_INET6 && s.error().code == Code::unimplemented) break;
    if (!s.ok()) return std::move(s).error();
    (family == AF_INET ? set.v4 : set.v6).push_back(std::move(*s));
  }
  return set;
}

}  // namespace

Status check_tcp_congestion_control(const std::string& name) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  return set_congestion_control(fd.get(), name);
}

Result<ListenerSet> open_transparent_listeners(int ns_fd, Transport transport, unsigned count,
                                               const std::string& congestion_control) {
  return run_in_netns<ListenerSet>(
      ns_fd, [&] { return open_transparent_listeners_here(transport, count, congestion_control, 0); });
}

// Connections queued on a TCP listener that closes move to a sibling in its
// SO_REUSEPORT group instead of being reset (Linux 5.14+): on take-over the next
// agent's listeners join the group and the old agent closes its own. Per namespace;
// an older kernel has no such file and resets them, as before.
static void migrate_requests_of_closed_listeners() {
  UniqueFd f(::open("/proc/sys/net/ipv4/tcp_migrate_req", O_WRONLY | O_CLOEXEC));
  if (f) (void)!::write(f.get(), "1", 1);
}

Result<ListenerSet> open_transparent_listeners_here(Transport transport, unsigned count,
                                                    const std::string& congestion_control, uint16_t port) {
  if (count == 0) return make_error(Code::invalid_argument, "listener count must be at least 1");
  if (transport == Transport::tcp) migrate_requests_of_closed_listeners();
  if (port != 0) return open_set(transport, count, congestion_control, port);
  // The kernel picks a free v4 port; the v6 wildcard may hold it already, so retry
  // with another port a bounded number of times.
  for (int attempt = 0;; ++attempt) {
    auto set = open_set(transport, count, congestion_control, 0);
    if (set.ok() || set.error().code != Code::aborted || attempt + 1 == kPortAttempts) return set;
  }
}

Result<UniqueFd> open_transparent_reply_socket(int ns_fd, const sockaddr* local, socklen_t len) {
  if (local->sa_family != AF_INET && local->sa_family != AF_INET6)
    return make_error(Code::invalid_argument, "reply socket address must be IPv4 or IPv6");
  return run_in_netns<UniqueFd>(ns_fd, [&]() -> Result<UniqueFd> {
    UniqueFd fd(::socket(local->sa_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return errno_error("socket");
    // Several guests may ask the same address: each reply socket shares it.
    KIB_TRY(set_int(fd.get(), SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR"));
    if (local->sa_family == AF_INET) {
      KIB_TRY(set_int(fd.get(), SOL_IP, IP_TRANSPARENT, "IP_TRANSPARENT"));
    } else {
      KIB_TRY(set_int(fd.get(), SOL_IPV6, IPV6_V6ONLY, "IPV6_V6ONLY"));
      KIB_TRY(set_int(fd.get(), SOL_IPV6, IPV6_TRANSPARENT, "IPV6_TRANSPARENT"));
    }
    if (::bind(fd.get(), local, len) != 0) return errno_error("bind reply socket");
    return fd;
  });
}

}  // namespace kib::netns
