#include "netns/change_watch.h"

#include <endian.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "agent/common/errno_error.h"
#include "netns/namespace_handle.h"

namespace kib::netns {
namespace {

constexpr int kLoopbackIfindex = 1;  // LOOPBACK_IFINDEX: lo is 1 in every namespace
// Small on purpose: the repair only needs to know that something changed, and an
// overflow (ENOBUFS) counts as a change. Bounds the kernel memory 2 sockets x
// thousands of namespaces may queue between two passes (the kernel doubles it).
constexpr int kReceiveBuffer = 16 * 1024;

// A non-blocking netlink socket of `protocol` in the calling thread's namespace,
// member of `groups`.
Result<UniqueFd> subscribe(int protocol, std::initializer_list<unsigned> groups) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol));
  if (!fd) {
    int err = errno;
    return errno_error("netlink socket", err);
  }
  int rcvbuf = kReceiveBuffer;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) != 0)
    return errno_error("netlink SO_RCVBUF");
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
    return errno_error("netlink bind");
  for (unsigned group : groups) {
    if (::setsockopt(fd.get(), SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) != 0)
      return errno_error("netlink join group " + std::to_string(group));
  }
  return fd;
}

// The first attribute of `type` after a fixed header of `head` bytes, or nullptr.
const nlattr* find_attr(const nlmsghdr* h, size_t head, unsigned type) {
  const size_t start = NLMSG_HDRLEN + NLMSG_ALIGN(head);
  if (h->nlmsg_len < start) return nullptr;
  const auto* base = reinterpret_cast<const char*>(h);
  size_t off = start;
  while (off + NLA_HDRLEN <= h->nlmsg_len) {
    const auto* a = reinterpret_cast<const nlattr*>(base + off);
    if (a->nla_len < NLA_HDRLEN || off + a->nla_len > h->nlmsg_len) return nullptr;
    if ((a->nla_type & NLA_TYPE_MASK) == type) return a;
    off += NLA_ALIGN(a->nla_len);
  }
  return nullptr;
}

// NLMSG_OK with `remaining` compared as unsigned only once it is known non-negative
// (the macro compares the u32 nlmsg_len with an int, which clang's -Wsign-compare flags).
bool message_ok(const nlmsghdr* h, int remaining) {
  return remaining >= static_cast<int>(sizeof(nlmsghdr)) && h->nlmsg_len >= sizeof(nlmsghdr) &&
         h->nlmsg_len <= static_cast<unsigned>(remaining);
}

template <typename Fn>
bool any_message(const void* buf, size_t len, Fn&& matters) {
  auto remaining = static_cast<int>(len);
  for (auto* h = static_cast<const nlmsghdr*>(buf); message_ok(h, remaining); h = NLMSG_NEXT(h, remaining)) {
    if (matters(h)) return true;
  }
  return false;
}

// Reads `fd` until it has nothing queued; true when a datagram mattered, was cut,
// or notifications were lost. Bounded: a namespace changing without pause counts as
// changed, and what is left stays queued for the next call.
template <typename Fn>
bool drain_socket(int fd, Fn&& matters) {
  alignas(nlmsghdr) std::array<char, 32 * 1024> buf;
  bool changed = false;
  for (int datagrams = 0;; ++datagrams) {
    if (datagrams == 256) return true;
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return changed;
      changed = true;  // ENOBUFS: the queue overflowed and notifications were lost
      if (errno == ENOBUFS) continue;
      return changed;  // anything else: unknown, so checked
    }
    if (n == 0) return changed;
    if ((msg.msg_flags & MSG_TRUNC) != 0 || matters(buf.data(), static_cast<size_t>(n))) changed = true;
  }
}

// Every object of a table (the table, chains, rules, sets, elements, objects,
// flowtables) names it in attribute 1: NFTA_TABLE_NAME, NFTA_CHAIN_TABLE,
// NFTA_RULE_TABLE, NFTA_SET_TABLE, ... `nft flush ruleset` reports the deletion of
// each. NFT_MSG_NEWGEN (no table) closes every transaction: not a change itself, but
// it names the generation the transaction ended at.
bool nft_message_matters(const nlmsghdr* h, const WatchedObjects& what) {
  static_assert(NFTA_TABLE_NAME == 1 && NFTA_CHAIN_TABLE == 1 && NFTA_RULE_TABLE == 1 && NFTA_SET_TABLE == 1 &&
                NFTA_SET_ELEM_LIST_TABLE == 1 && NFTA_OBJ_TABLE == 1 && NFTA_FLOWTABLE_TABLE == 1);
  if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES) return false;
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return false;
  const auto* g = static_cast<const nfgenmsg*>(NLMSG_DATA(h));
  if (g->nfgen_family != NFPROTO_INET) return false;
  const nlattr* a = find_attr(h, sizeof(nfgenmsg), 1);
  if (a == nullptr) return false;
  const auto* name = reinterpret_cast<const char*>(a) + NLA_HDRLEN;
  const size_t n = ::strnlen(name, a->nla_len - NLA_HDRLEN);
  return std::string_view(name, n) == what.nft_table;
}

// The generation a NFT_MSG_NEWGEN message names, or nullopt for any other message.
std::optional<uint32_t> new_generation(const nlmsghdr* h) {
  if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES || NFNL_MSG_TYPE(h->nlmsg_type) != NFT_MSG_NEWGEN)
    return std::nullopt;
  const nlattr* a = find_attr(h, sizeof(nfgenmsg), NFTA_GEN_ID);
  if (a == nullptr || a->nla_len < NLA_HDRLEN + sizeof(uint32_t)) return std::nullopt;
  uint32_t id = 0;
  std::memcpy(&id, reinterpret_cast<const char*>(a) + NLA_HDRLEN, sizeof id);
  return be32toh(id);
}

}  // namespace

bool nft_notification_matters(const void* buf, size_t len, const WatchedObjects& what) {
  return any_message(buf, len, [&](const nlmsghdr* h) { return nft_message_matters(h, what); });
}

NftNotifications read_nft_notifications(const void* buf, size_t len, const WatchedObjects& what,
                                        NftNotifications so_far) {
  auto remaining = static_cast<int>(len);
  for (auto* h = static_cast<const nlmsghdr*>(buf); message_ok(h, remaining); h = NLMSG_NEXT(h, remaining)) {
    if (auto gen = new_generation(h)) {
      so_far.generation = gen;
      so_far.open = false;
    } else if (nft_message_matters(h, what)) {
      so_far.matters = true;
      so_far.open = true;  // its transaction's NEWGEN has not been read yet
    }
  }
  return so_far;
}

// Rules: any (few, and rarely changed). Routes: those of the watched table. Links:
// any (lo's loss takes the table's `local default dev lo` with it, silently for
// IPv4; a link coming or going can make IPv6 live or not, policy_routing.h). IPv4
// addresses: lo's (its last one going disables IPv4 routing on it, silently too).
// IPv6 addresses: any, as they appear and go with IPv6 being turned on and off on an
// interface.
bool route_notification_matters(const void* buf, size_t len, const WatchedObjects& what) {
  return any_message(buf, len, [&](const nlmsghdr* h) {
    switch (h->nlmsg_type) {
      case RTM_NEWRULE:
      case RTM_DELRULE: return true;
      case RTM_NEWROUTE:
      case RTM_DELROUTE: {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg))) return false;
        uint32_t table = static_cast<const rtmsg*>(NLMSG_DATA(h))->rtm_table;
        if (const nlattr* a = find_attr(h, sizeof(rtmsg), RTA_TABLE); a && a->nla_len >= NLA_HDRLEN + sizeof(uint32_t))
          std::memcpy(&table, reinterpret_cast<const char*>(a) + NLA_HDRLEN, sizeof table);
        return table == what.route_table;
      }
      case RTM_NEWLINK:
      case RTM_DELLINK: return true;
      case RTM_NEWADDR:
      case RTM_DELADDR: {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) return false;
        const auto* a = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
        return a->ifa_family == AF_INET6 || a->ifa_index == kLoopbackIfindex;
      }
      default: return false;
    }
  });
}

Result<ChangeWatch> ChangeWatch::open(int ns_fd, WatchedObjects what) {
  return run_in_netns<ChangeWatch>(ns_fd, [&] { return open_here(std::move(what)); });
}

Result<ChangeWatch> ChangeWatch::open_here(WatchedObjects what) {
  auto nft = subscribe(NETLINK_NETFILTER, {NFNLGRP_NFTABLES});
  if (!nft.ok()) return std::move(nft).error();
  auto route = subscribe(NETLINK_ROUTE, {RTNLGRP_IPV4_RULE, RTNLGRP_IPV6_RULE, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE,
                                         RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR});
  if (!route.ok()) return std::move(route).error();
  return ChangeWatch(std::move(nft.value()), std::move(route.value()), std::move(what));
}

WatchReport ChangeWatch::drain() {
  // Both drained: what is left queued would report the same change again next time.
  WatchReport r;
  NftNotifications nft;
  const bool lost = drain_socket(nft_.get(), [&](const void* b, size_t n) {
    nft = read_nft_notifications(b, n, what_, nft);
    return false;  // what matters is in `nft`; true from drain_socket means loss
  });
  r.nft = lost || nft.matters;
  // Known only when nothing was lost and the last change read has its NEWGEN read too.
  if (r.nft && !lost && !nft.open) r.nft_generation = nft.generation;
  r.routing =
      drain_socket(route_.get(), [&](const void* b, size_t n) { return route_notification_matters(b, n, what_); });
  return r;
}

Result<ChangeWatchSet> ChangeWatchSet::create() {
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep) {
    int err = errno;
    return errno_error("epoll_create1", err);
  }
  return ChangeWatchSet(std::move(ep));
}

Status ChangeWatchSet::add(uint64_t key, ChangeWatch watch) {
  remove(key);
  for (int fd : {watch.nft_fd(), watch.route_fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: a socket left undrained is reported again
    ev.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      Error err = errno_error("epoll_ctl add netlink socket");
      // The first socket may be in the set already (see remove()).
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, watch.nft_fd(), nullptr);
      return err;
    }
  }
  watches_.emplace(key, std::move(watch));
  return {};
}

void ChangeWatchSet::remove(uint64_t key) {
  auto it = watches_.find(key);
  if (it == watches_.end()) return;
  // Explicitly: an fd a forked child still shares would otherwise stay in the set.
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.nft_fd(), nullptr);
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.route_fd(), nullptr);
  watches_.erase(it);
}

Result<std::vector<std::pair<uint64_t, WatchReport>>> ChangeWatchSet::changed() {
  std::vector<std::pair<uint64_t, WatchReport>> out;
  std::array<epoll_event, 64> events;
  // Bounded: a namespace flooding notifications cannot keep this loop going; what
  // is left is reported next time.
  const size_t rounds = watches_.size() * 2 / events.size() + 2;
  for (size_t round = 0; round < rounds; ++round) {
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("epoll_wait netlink sockets");
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[static_cast<size_t>(i)].data.u64;
      auto it = watches_.find(key);
      if (it == watches_.end()) continue;
      if (WatchReport r = it->second.drain()) out.emplace_back(key, r);
    }
    if (static_cast<size_t>(n) < events.size()) break;
  }
  return out;
}

}  // namespace kib::netns
