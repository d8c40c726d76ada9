#pragma once
// A loopback port nothing listens on: a socket bound to 127.0.0.1 at an ephemeral
// port and never listening, held so that no other test takes the port meanwhile. A
// connect there is refused at once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "agent/common/unique_fd.h"

namespace kib::test {

struct DeadPort {
  UniqueFd fd;
  uint16_t port = 0;
};

// Empty (port 0) when the socket could not be bound.
inline DeadPort dead_loopback_port() {
  DeadPort d{UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), 0};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(d.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(d.fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0)
    d.port = ntohs(a.sin_port);
  return d;
}

}  // namespace kib::test
