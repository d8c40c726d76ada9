#include "agent/api/http/tcp_listener.h"

#include <netdb.h>
#include <sys/socket.h>

#include <memory>

#include "agent/common/errno_error.h"

namespace kib::api {

Result<UniqueFd> open_tcp_listener(const std::string& host_port) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return Error{Code::invalid_argument, "api.tls.listen: expected host:port"};
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return Error{Code::invalid_argument, "api.tls.listen " + host_port + ": " + gai_strerror(rc)};
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(res, freeaddrinfo);

  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0) return errno_error("cannot bind " + host_port);
  if (::listen(fd.get(), 128) != 0) return errno_error("cannot listen on " + host_port);
  return fd;
}

}  // namespace kib::api
