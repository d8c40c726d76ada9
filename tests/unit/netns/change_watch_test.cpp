// Which notifications make the repair check a namespace (netns/change_watch.h): the
// filters over hand-built netlink datagrams. The sockets themselves are covered by
// tests/integration/workspace/test_change_watch.py (root).
#include <doctest/doctest.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <endian.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "netns/change_watch.h"

using namespace kib::netns;

namespace {

const WatchedObjects kWhat{"kibotos", 27497};

// One netlink message: header, fixed part, then attributes (type, bytes).
struct Msg {
  std::vector<char> bytes;
  Msg(const void* fixed, size_t fixed_len) {
    bytes.resize(NLMSG_HDRLEN);
    append(fixed, fixed_len);
  }
  void append(const void* p, size_t n) {
    // Grown first, then copied into: GCC 12 -O2 flags insert() at the end of the
    // 16-byte header with a false -Warray-bounds.
    const size_t at = bytes.size();
    bytes.resize(NLMSG_ALIGN(at + n));
    std::memcpy(bytes.data() + at, p, n);
  }
  Msg& attr(uint16_t type, const void* p, size_t n) {
    nlattr a{static_cast<uint16_t>(NLA_HDRLEN + n), type};
    append(&a, sizeof a);  // NLA_HDRLEN
    append(p, n);
    return *this;
  }
  Msg& str(uint16_t type, const std::string& s) { return attr(type, s.c_str(), s.size() + 1); }
  Msg& u32(uint16_t type, uint32_t v) { return attr(type, &v, sizeof v); }
  std::vector<char> done(uint16_t type) const {
    std::vector<char> out = bytes;
    nlmsghdr h{};
    h.nlmsg_len = static_cast<uint32_t>(out.size());
    h.nlmsg_type = type;
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
};

std::vector<char> nft(uint8_t msg, uint8_t family, const std::string& table) {
  nfgenmsg g{};
  g.nfgen_family = family;
  g.version = NFNETLINK_V0;
  Msg m(&g, sizeof g);
  if (!table.empty()) m.str(1, table);
  return m.done(static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg));
}

std::vector<char> route(uint16_t type, uint32_t table) {
  rtmsg r{};
  r.rtm_family = AF_INET;
  r.rtm_table = static_cast<uint8_t>(table > 255 ? uint32_t{RT_TABLE_COMPAT} : table);
  Msg m(&r, sizeof r);
  m.u32(RTA_TABLE, table);
  return m.done(type);
}

std::vector<char> addr(uint16_t type, uint8_t family, uint32_t index) {
  ifaddrmsg a{};
  a.ifa_family = family;
  a.ifa_index = index;
  return Msg(&a, sizeof a).done(type);
}

// NFT_MSG_NEWGEN as the kernel sends it after each transaction: NFTA_GEN_ID big-endian.
std::vector<char> newgen(uint32_t id) {
  nfgenmsg g{};
  g.nfgen_family = AF_UNSPEC;
  g.version = NFNETLINK_V0;
  return Msg(&g, sizeof g).u32(NFTA_GEN_ID, htobe32(id)).done((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN);
}

std::vector<char> cat(std::initializer_list<std::vector<char>> parts) {
  std::vector<char> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

NftNotifications fold(std::initializer_list<std::vector<char>> datagrams) {
  NftNotifications n;
  for (const auto& d : datagrams) n = read_nft_notifications(d.data(), d.size(), kWhat, n);
  return n;
}

bool nft_matters(const std::vector<char>& d) { return nft_notification_matters(d.data(), d.size(), kWhat); }
bool route_matters(const std::vector<char>& d) { return route_notification_matters(d.data(), d.size(), kWhat); }

}  // namespace

TEST_CASE("a change to any object of the agent's inet table counts") {
  for (uint8_t msg : {NFT_MSG_NEWTABLE, NFT_MSG_DELTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_DELCHAIN, NFT_MSG_NEWRULE,
                      NFT_MSG_DELRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM})
    CHECK(nft_matters(nft(msg, NFPROTO_INET, "kibotos")));
}

TEST_CASE("nftables changes to other tables, families, and the generation do not count") {
  CHECK_FALSE(nft_matters(nft(NFT_MSG_NEWRULE, NFPROTO_INET, "guestfw")));
  CHECK_FALSE(nft_matters(nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos2")));
  CHECK_FALSE(nft_matters(nft(NFT_MSG_NEWTABLE, NFPROTO_IPV4, "kibotos")));
  CHECK_FALSE(nft_matters(nft(NFT_MSG_NEWGEN, NFPROTO_UNSPEC, "")));
}

TEST_CASE("a datagram counts when any of its messages does") {
  auto d = nft(NFT_MSG_NEWRULE, NFPROTO_INET, "guestfw");
  auto ours = nft(NFT_MSG_DELTABLE, NFPROTO_INET, "kibotos");
  d.insert(d.end(), ours.begin(), ours.end());
  CHECK(nft_matters(d));
}

TEST_CASE("truncated or malformed messages are read without overrun and do not count by themselves") {
  auto d = nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos");
  CHECK_FALSE(nft_notification_matters(d.data(), 8, kWhat));
  // An attribute claiming more than the message holds.
  auto bad = d;
  auto* a = reinterpret_cast<nlattr*>(bad.data() + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
  a->nla_len = 4000;
  CHECK_FALSE(nft_matters(bad));
}

TEST_CASE("routes count only in the agent's table, rules always") {
  CHECK(route_matters(route(RTM_NEWROUTE, 27497)));
  CHECK(route_matters(route(RTM_DELROUTE, 27497)));
  CHECK_FALSE(route_matters(route(RTM_NEWROUTE, RT_TABLE_MAIN)));
  CHECK_FALSE(route_matters(route(RTM_DELROUTE, RT_TABLE_LOCAL)));
  fib_rule_hdr r{};
  r.family = AF_INET;
  CHECK(route_matters(Msg(&r, sizeof r).done(RTM_NEWRULE)));
  CHECK(route_matters(Msg(&r, sizeof r).done(RTM_DELRULE)));
}

TEST_CASE("links count; IPv4 addresses on lo only; IPv6 addresses anywhere") {
  ifinfomsg l{};
  l.ifi_index = 7;
  CHECK(route_matters(Msg(&l, sizeof l).done(RTM_NEWLINK)));
  CHECK(route_matters(addr(RTM_DELADDR, AF_INET, 1)));
  CHECK_FALSE(route_matters(addr(RTM_NEWADDR, AF_INET, 7)));
  CHECK(route_matters(addr(RTM_NEWADDR, AF_INET6, 7)));
}

TEST_CASE("a transaction on the agent's table is read with the generation it ended at") {
  auto n = fold({cat({nft(NFT_MSG_DELTABLE, NFPROTO_INET, "kibotos"), nft(NFT_MSG_NEWTABLE, NFPROTO_INET, "kibotos")}),
                 newgen(41)});
  CHECK(n.matters);
  CHECK_FALSE(n.open);
  REQUIRE(n.generation.has_value());
  CHECK(*n.generation == 41);
}

TEST_CASE("a change read after the last generation leaves its transaction open") {
  auto n = fold({cat({nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos"), newgen(41)}),
                 nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos")});
  CHECK(n.matters);
  CHECK(n.open);  // its NEWGEN not read yet: the generation says nothing about it
  n = fold({cat({nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos"), newgen(41)}),
            cat({nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos"), newgen(42)})});
  CHECK_FALSE(n.open);
  CHECK(*n.generation == 42);
}

TEST_CASE("another table's transaction moves the generation without mattering") {
  auto n = fold({cat({nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos"), newgen(41)}),
                 cat({nft(NFT_MSG_NEWTABLE, NFPROTO_INET, "guestfw"), newgen(42)})});
  CHECK(n.matters);
  CHECK(*n.generation == 42);  // not 41: the repair then reads and compares
  auto only_other = fold({cat({nft(NFT_MSG_NEWTABLE, NFPROTO_INET, "guestfw"), newgen(7)})});
  CHECK_FALSE(only_other.matters);
}

TEST_CASE("a NEWGEN without its attribute names no generation") {
  nfgenmsg g{};
  auto bare = Msg(&g, sizeof g).done((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN);
  auto n = fold({cat({nft(NFT_MSG_NEWRULE, NFPROTO_INET, "kibotos"), bare})});
  CHECK(n.matters);
  CHECK(n.open);
  CHECK_FALSE(n.generation.has_value());
}
