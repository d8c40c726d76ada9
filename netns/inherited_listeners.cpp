#include "netns/inherited_listeners.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace kib::netns {
namespace {

// (network namespace cookie, family, port)
using Key = std::tuple<uint64_t, int, uint16_t>;

struct Pool {
  std::mutex mu;
  std::map<Key, std::vector<UniqueFd>> sockets;
};

Pool& pool() {
  static Pool p;
  return p;
}

std::optional<uint64_t> netns_cookie(int fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) return std::nullopt;
  return cookie;
}

std::optional<Key> key_of(int fd) {
  int type = 0, listening = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return std::nullopt;
  len = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) return std::nullopt;
  sockaddr_storage ss{};
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return std::nullopt;
  auto cookie = netns_cookie(fd);
  if (!cookie) return std::nullopt;
  if (ss.ss_family == AF_INET) return Key{*cookie, AF_INET, ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)};
  if (ss.ss_family == AF_INET6) return Key{*cookie, AF_INET6, ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)};
  return std::nullopt;
}

// The calling thread's namespace's cookie (that of a socket made here), when any
// listener was inherited at all.
std::optional<uint64_t> cookie_here() {
  {
    std::lock_guard lk(pool().mu);
    if (pool().sockets.empty()) return std::nullopt;
  }
  UniqueFd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  return probe ? netns_cookie(probe.get()) : std::nullopt;
}

}  // namespace

void inherit_listener(UniqueFd fd) {
  auto key = key_of(fd.get());
  if (!key) return;
  std::lock_guard lk(pool().mu);
  pool().sockets[*key].push_back(std::move(fd));
}

bool have_inherited_listeners() {
  std::lock_guard lk(pool().mu);
  return !pool().sockets.empty();
}

uint16_t inherited_port_here() {
  auto cookie = cookie_here();
  if (!cookie) return 0;
  std::lock_guard lk(pool().mu);
  auto it = pool().sockets.lower_bound(Key{*cookie, 0, 0});
  return it != pool().sockets.end() && std::get<0>(it->first) == *cookie ? std::get<2>(it->first) : 0;
}

std::optional<UniqueFd> take_inherited_listener(int family, uint16_t port) {
  auto cookie = cookie_here();
  if (!cookie) return std::nullopt;
  std::lock_guard lk(pool().mu);
  auto it = pool().sockets.find(Key{*cookie, family, port});
  if (it == pool().sockets.end()) return std::nullopt;
  UniqueFd fd = std::move(it->second.back());
  it->second.pop_back();
  if (it->second.empty()) pool().sockets.erase(it);
  return fd;
}

size_t clear_inherited_listeners() {
  std::lock_guard lk(pool().mu);
  size_t n = 0;
  for (auto& [key, fds] : pool().sockets) n += fds.size();
  pool().sockets.clear();
  return n;
}

}  // namespace kib::netns
