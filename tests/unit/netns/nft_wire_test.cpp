// The frames between the agent and its nftables helper (netns/nft_wire.h), over a
// real socket pair: what one end sends the other reads back exactly, the namespace
// fd arrives as a new fd to the same file, and a peer that went away is an error.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <thread>

#include "netns/nft_wire.h"

using namespace kib;
using namespace kib::netns;

namespace {

struct Pair {
  UniqueFd a, b;
  Pair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
};

bool same_file(int x, int y) {
  struct stat sx {
  }, sy{};
  return ::fstat(x, &sx) == 0 && ::fstat(y, &sy) == 0 && sx.st_dev == sy.st_dev && sx.st_ino == sy.st_ino;
}

}  // namespace

TEST_CASE("a request arrives whole with its namespace fd") {
  Pair p;
  UniqueFd ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  REQUIRE(ns);
  // Larger than a socket buffer: the sender blocks until the reader drains it.
  NftRequest req{NftOp::write, std::string(1 << 20, 'x') + "end", "list table inet kibotos"};
  std::thread sender([&] { CHECK(send_nft_request(p.a.get(), ns.get(), req).ok()); });
  auto got = recv_nft_request(p.b.get());
  sender.join();
  REQUIRE(got.ok());
  CHECK(got->first.get() != ns.get());
  CHECK(same_file(got->first.get(), ns.get()));
  CHECK((::fcntl(got->first.get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(got->second.op == NftOp::write);
  CHECK(got->second.text == req.text);
  CHECK(got->second.list == req.list);
}

TEST_CASE("a reply keeps its status, code, output and generation apart") {
  Pair p;
  CHECK(send_nft_reply(p.a.get(), NftReply{{}, std::string("table inet kibotos {}"), 4242u}).ok());
  CHECK(send_nft_reply(p.a.get(), NftReply{{}, std::nullopt, std::nullopt}).ok());
  CHECK(send_nft_reply(p.a.get(),
                       NftReply{Error{Code::failed_precondition, "nft: No such file"}, std::nullopt, std::nullopt})
            .ok());
  auto listed = recv_nft_reply(p.b.get());
  REQUIRE(listed.ok());
  CHECK(listed->status.ok());
  REQUIRE(listed->output.has_value());
  CHECK(*listed->output == "table inet kibotos {}");
  REQUIRE(listed->generation.has_value());
  CHECK(*listed->generation == 4242u);
  auto unlisted = recv_nft_reply(p.b.get());
  REQUIRE(unlisted.ok());
  CHECK(unlisted->status.ok());
  CHECK(!unlisted->output.has_value());
  CHECK(!unlisted->generation.has_value());
  auto failed = recv_nft_reply(p.b.get());
  REQUIRE(failed.ok());
  REQUIRE(!failed->status.ok());
  CHECK(failed->status.error().code == Code::failed_precondition);
  CHECK(failed->status.error().message == "nft: No such file");
}

TEST_CASE("a peer that closed its end is unavailable, mid-frame too") {
  Pair p;
  const uint32_t half = 1;
  REQUIRE(::send(p.a.get(), &half, sizeof half, 0) == sizeof half);
  p.a.reset();
  auto reply = recv_nft_reply(p.b.get());
  REQUIRE(!reply.ok());
  CHECK(reply.error().code == Code::unavailable);
  auto request = recv_nft_request(p.b.get());
  REQUIRE(!request.ok());
  CHECK(request.error().code == Code::unavailable);
  UniqueFd ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  CHECK(send_nft_request(p.b.get(), ns.get(), NftRequest{}).error().code == Code::unavailable);
}

TEST_CASE("a request without a namespace fd is refused") {
  Pair p;
  const uint32_t header[3] = {1, 0, 0};
  REQUIRE(::send(p.a.get(), header, sizeof header, 0) == sizeof header);
  auto request = recv_nft_request(p.b.get());
  REQUIRE(!request.ok());
  CHECK(request.error().message.find("without a namespace fd") != std::string::npos);
}

TEST_CASE("a frame claiming more than the limit is refused before anything is allocated") {
  Pair p;
  const uint32_t header[4] = {0, 0, 0xffffffffu, 0};
  REQUIRE(::send(p.a.get(), header, sizeof header, 0) == sizeof header);
  auto reply = recv_nft_reply(p.b.get());
  REQUIRE(!reply.ok());
  CHECK(reply.error().message.find("too large") != std::string::npos);
}
