#include "netns/time_wait_sweep.h"

#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netlink/msg.h>

#include <cstring>
#include <memory>
#include <vector>

#include "agent/common/errno_error.h"
#include "netns/netlink_socket.h"

namespace kib::netns {
namespace {

// A host prefix from raw address bytes (network order).
Prefix host_prefix(int family, const void* bytes) {
  Prefix p;
  p.family = family;
  p.length = family == AF_INET ? 32 : 128;
  std::memcpy(p.addr.data(), bytes, family == AF_INET ? 4 : 16);
  return p;
}

Result<std::vector<Prefix>> local_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errno_error("getifaddrs");
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  std::vector<Prefix> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET)
      out.push_back(host_prefix(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr));
    else if (a->ifa_addr->sa_family == AF_INET6)
      out.push_back(host_prefix(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr));
  }
  return out;
}

// 127/8 is local without being listed address by address; a dual-stack socket
// reports an IPv4 peer as ::ffff:a.b.c.d.
bool is_local(Prefix a, const std::vector<Prefix>& locals) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a.family == AF_INET6 && std::memcmp(a.addr.data(), kMapped, sizeof kMapped) == 0)
    a = host_prefix(AF_INET, a.addr.data() + 12);
  if (a.family == AF_INET && a.addr[0] == 127) return true;
  for (const auto& l : locals)
    if (l == a) return true;
  return false;
}

inet_diag_req_v2 request(int family) {
  inet_diag_req_v2 r{};
  r.sdiag_family = static_cast<uint8_t>(family);
  r.sdiag_protocol = IPPROTO_TCP;
  r.idiag_states = 1u << TCP_TIME_WAIT;
  return r;
}

int collect(nl_msg* msg, void* arg) {
  auto* out = static_cast<std::vector<inet_diag_sockid>*>(arg);
  nlmsghdr* h = nlmsg_hdr(msg);
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || nlmsg_datalen(h) < static_cast<int>(sizeof(inet_diag_msg)))
    return NL_SKIP;
  const auto* m = static_cast<const inet_diag_msg*>(nlmsg_data(h));
  if (m->idiag_state == TCP_TIME_WAIT) out->push_back(m->id);
  return NL_OK;
}

Result<std::vector<inet_diag_sockid>> dump_time_wait(nl_sock* sk, int family) {
  inet_diag_req_v2 req = request(family);
  if (int err = nl_send_simple(sk, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req, sizeof req); err < 0)
    return nl_error("sock_diag dump", err);
  std::vector<inet_diag_sockid> ids;
  nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, collect, &ids);
  if (int err = nl_recvmsgs_default(sk); err < 0) return nl_error("sock_diag dump", err);
  return ids;
}

// ENOENT: the socket's 60 s ran out between the dump and now.
Status destroy(nl_sock* sk, int family, const inet_diag_sockid& id) {
  inet_diag_req_v2 req = request(family);
  req.id = id;
  if (int err = nl_send_simple(sk, SOCK_DESTROY, 0, &req, sizeof req); err < 0) return nl_error("SOCK_DESTROY", err);
  int err = nl_wait_for_ack(sk);
  if (err < 0 && err != -NLE_OBJ_NOTFOUND) return nl_error("SOCK_DESTROY", err);
  return {};
}

}  // namespace

Result<size_t> end_transparent_time_wait(const KeepTimeWait& keep) {
  auto locals = local_addresses();
  if (!locals.ok()) return std::move(locals).error();
  auto sk = connect_netlink(NETLINK_SOCK_DIAG);
  if (!sk.ok()) return std::move(sk).error();
  size_t ended = 0;
  for (int family : {AF_INET, AF_INET6}) {
    auto ids = dump_time_wait(sk->get(), family);
    if (!ids.ok()) return std::move(ids).error();
    for (const auto& id : *ids) {
      const Prefix local = host_prefix(family, id.idiag_src);
      if (is_local(local, *locals) || (keep && keep(local, ntohs(id.idiag_sport)))) continue;
      KIB_TRY(destroy(sk->get(), family, id));
      ++ended;
    }
  }
  return ended;
}

}  // namespace kib::netns
