#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>

#include <vector>

#include "agent/dns/reply_socket_cache.h"

using namespace kib::dns;
using kib::policy::IpAddress;

namespace {

SocketAddress asked(const char* ip) { return SocketAddress::from(*IpAddress::parse(ip), 53); }

}  // namespace

TEST_CASE("reply sockets are opened once per asked address and reused") {
  std::vector<SocketAddress> opened;
  ReplySocketCache cache(4, [&](const SocketAddress& a) -> kib::Result<kib::UniqueFd> {
    opened.push_back(a);
    return kib::UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  });
  auto a = cache.get(asked("192.0.2.1"));
  auto b = cache.get(asked("192.0.2.1"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  CHECK(opened.size() == 1);
}

TEST_CASE("the cache is bounded and evicts the least recently used socket") {
  std::vector<SocketAddress> opened;
  ReplySocketCache cache(2, [&](const SocketAddress& a) -> kib::Result<kib::UniqueFd> {
    opened.push_back(a);
    return kib::UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  });
  REQUIRE(cache.get(asked("192.0.2.1")).ok());
  REQUIRE(cache.get(asked("192.0.2.2")).ok());
  REQUIRE(cache.get(asked("192.0.2.1")).ok());  // .2 is now the oldest
  REQUIRE(cache.get(asked("192.0.2.3")).ok());
  CHECK(cache.size() == 2);
  REQUIRE(cache.get(asked("192.0.2.1")).ok());
  CHECK(opened.size() == 3);
  REQUIRE(cache.get(asked("192.0.2.2")).ok());
  CHECK(opened.size() == 4);
}

TEST_CASE("a failure to open is returned and nothing is cached") {
  ReplySocketCache cache(2, [](const SocketAddress&) -> kib::Result<kib::UniqueFd> {
    return kib::make_error(kib::Code::internal, "bind failed");
  });
  CHECK_FALSE(cache.get(asked("192.0.2.1")).ok());
  CHECK(cache.size() == 0);
}

TEST_CASE("a link-local address on two links is two reply sockets, each bound with its link") {
  std::vector<SocketAddress> opened;
  ReplySocketCache cache(4, [&](const SocketAddress& a) -> kib::Result<kib::UniqueFd> {
    opened.push_back(a);
    return kib::UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  });
  const auto fe80 = *IpAddress::parse("fe80::1");
  const SocketAddress on2 = SocketAddress::from(fe80, 53, 2), on3 = SocketAddress::from(fe80, 53, 3);
  REQUIRE(cache.get(on2).ok());
  REQUIRE(cache.get(on3).ok());
  REQUIRE(cache.get(on2).ok());
  REQUIRE(opened.size() == 2);
  CHECK(opened[1].v6.sin6_scope_id == 3);
  CHECK(SocketAddress::from_sockaddr(&opened[1].sa) == on3);
}
