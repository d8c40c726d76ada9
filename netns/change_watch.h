#pragma once
// Change notifications from Workspace namespaces, so that the periodic repair checks
// only the namespaces where the agent's table or policy routing may have changed,
// instead of dumping every namespace each pass (~0.7 ms of CPU each, issue 26).
//
// Per namespace two netlink sockets created inside it (a socket stays bound to the
// namespace it was created in and can then be read from any thread):
//   - NETLINK_NETFILTER in NFNLGRP_NFTABLES: every committed nftables change;
//   - NETLINK_ROUTE in the rule, route, link and address groups of both families.
//     Links and addresses count too because IPv4 drops the routes through a device
//     that goes down or loses its last address without sending RTM_DELROUTE, and
//     because they show IPv6 being turned on or off (policy_routing.h).
// Only notifications that can concern what the agent installs count (its table, its
// route table, links, lo's and IPv6 addresses: route_notification_matters); a queue that overflowed (ENOBUFS) counts as
// a change, since what was lost may have been one. All sockets sit in one epoll set: never select(), the process holds
// far more than FD_SETSIZE fds.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::netns {

struct WatchedObjects {
  std::string nft_table;     // an `inet` table's name
  uint32_t route_table = 0;  // the policy-routing table
};

// What a namespace reported: its nftables (any committed change there, the agent's
// own writes included), its policy routing (rules, routes, links, addresses).
struct WatchReport {
  bool nft = false;
  bool routing = false;
  // With nft: the generation the last transaction read ended at (NFT_MSG_NEWGEN),
  // when nothing was lost and that transaction's NEWGEN came after every change read;
  // else nullopt. Equal to the generation of the agent's own last write, it says that
  // write was all that happened.
  std::optional<uint32_t> nft_generation;
  explicit operator bool() const { return nft || routing; }
};

// The two sockets of one namespace.
class ChangeWatch {
 public:
  // Changes from this call on are reported.
  static Result<ChangeWatch> open(int ns_fd, WatchedObjects what);
  // The same in the calling thread's namespace.
  static Result<ChangeWatch> open_here(WatchedObjects what);

  // Reads every queued notification without blocking; per socket, whether one was
  // about the watched objects or some were lost.
  WatchReport drain();

  int nft_fd() const { return nft_.get(); }
  int route_fd() const { return route_.get(); }

 private:
  ChangeWatch(UniqueFd nft, UniqueFd route, WatchedObjects what)
      : nft_(std::move(nft)), route_(std::move(route)), what_(std::move(what)) {}
  UniqueFd nft_;
  UniqueFd route_;
  WatchedObjects what_;
};

// Whether one notification datagram (of NETLINK_NETFILTER or NETLINK_ROUTE) is about
// `what`. Exposed for tests.
bool nft_notification_matters(const void* buf, size_t len, const WatchedObjects& what);
// NETLINK_NETFILTER datagrams read in order, folded one by one: whether one was about
// `what`, the last generation a NEWGEN named, and whether a change about `what` came
// after it (its transaction still open as far as the datagrams read show).
struct NftNotifications {
  bool matters = false;
  std::optional<uint32_t> generation;
  bool open = false;
};
NftNotifications read_nft_notifications(const void* buf, size_t len, const WatchedObjects& what,
                                        NftNotifications so_far = {});
bool route_notification_matters(const void* buf, size_t len, const WatchedObjects& what);

// The watches of many namespaces, by a caller-chosen key, over one epoll fd.
// Not thread-safe: the caller serialises calls.
class ChangeWatchSet {
 public:
  static Result<ChangeWatchSet> create();

  // Adds a watch (ChangeWatch::open) under `key`, replacing one already there.
  Status add(uint64_t key, ChangeWatch watch);
  void remove(uint64_t key);
  bool contains(uint64_t key) const { return watches_.count(key) != 0; }
  size_t size() const { return watches_.size(); }

  // Without blocking: the keys whose namespace reported a change since the last call,
  // with what it reported (each ready socket drained). O(namespaces with a
  // notification).
  Result<std::vector<std::pair<uint64_t, WatchReport>>> changed();

 private:
  explicit ChangeWatchSet(UniqueFd epoll) : epoll_(std::move(epoll)) {}
  UniqueFd epoll_;
  std::unordered_map<uint64_t, ChangeWatch> watches_;
};

}  // namespace kib::netns
