#pragma once
// libnl sockets and errors as the netns code uses them: owned by unique_ptr, and
// opened on the thread that talks to the namespace (a netlink socket belongs to the
// namespace of the thread that created it).
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <memory>
#include <string>

#include "agent/common/result.h"

namespace kib::netns {

// unique_ptr deleter calling a libnl free/put function.
template <auto Fn>
struct NlDeleter {
  template <typename T>
  void operator()(T* p) const { Fn(p); }
};
using NlSocket = std::unique_ptr<nl_sock, NlDeleter<nl_socket_free>>;

inline Error nl_error(const std::string& what, int err) {
  return make_error(Code::internal, what + ": " + nl_geterror(err));
}

// A socket connected to `protocol` (NETLINK_ROUTE, NETLINK_SOCK_DIAG, ...).
inline Result<NlSocket> connect_netlink(int protocol) {
  NlSocket sk(nl_socket_alloc());
  if (!sk) return make_error(Code::resource_exhausted, "nl_socket_alloc failed");
  if (int err = nl_connect(sk.get(), protocol); err < 0) return nl_error("netlink connect", err);
  return sk;
}

}  // namespace kib::netns
