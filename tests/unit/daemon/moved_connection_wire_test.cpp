// A moved relay through the handover socket as the take-over sends it: the fields,
// the unsent bytes (binary, line breaks included) and the fds, which must still be
// the same sockets and pipes (with what the pipes hold) on the other side.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "agent/daemon/handover.h"
#include "agent/daemon/moved_connection_wire.h"

using kib::Code;
using kib::MovedConnection;
using kib::UniqueFd;
using kib::daemon::decode_moved;
using kib::daemon::encode_moved;
using kib::daemon::receive_handover;
using kib::daemon::send_handover;

namespace {

struct Pair {
  UniqueFd a, b;
};

Pair seqpacket_pair() {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  const int big = 1 << 20;
  for (int fd : sv) REQUIRE(setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) == 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

Pair stream_pair() {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

// The fd's other end (peer) sees what is written into it.
std::string through(int fd, int peer, const std::string& text) {
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  std::string got(text.size(), '\0');
  REQUIRE(::read(peer, got.data(), got.size()) == static_cast<ssize_t>(got.size()));
  return got;
}

kib::Result<MovedConnection> round_trip(const MovedConnection& c) {
  Pair link = seqpacket_pair();
  auto m = encode_moved(c);
  REQUIRE(send_handover(link.a.get(), "connection", m.detail, m.fds, m.payload).ok());
  auto got = receive_handover(link.b.get(), std::chrono::seconds(1));
  REQUIRE(got.ok());
  return decode_moved(std::move(got).value());
}

}  // namespace

TEST_CASE("moved connection: fields, unsent bytes and fds arrive as they left") {
  Pair guest = stream_pair(), up = stream_pair();
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  REQUIRE(::write(p[1], "in the pipe", 11) == 11);
  MovedConnection c;
  c.workspace_id = "ws-1";
  c.relay.egress_id = "eg-7";
  c.relay.revision = 42;
  c.relay.idle_ms = 1234;
  c.relay.drain_left_ms = 5000;
  c.relay.guest = std::move(guest.a);
  c.relay.up = std::move(up.a);
  c.relay.flow[0].pending = std::string("line\nbreak\0and binary", 21);
  c.relay.flow[0].eof = true;
  c.relay.flow[0].shut = true;
  c.relay.flow[1].pending = std::string(128 * 1024, 'x');  // two provided buffers' worth
  c.relay.flow[1].pipe_r = UniqueFd(p[0]);
  c.relay.flow[1].pipe_w = UniqueFd(p[1]);

  auto got = round_trip(c);
  REQUIRE(got.ok());
  CHECK(got->workspace_id == "ws-1");
  CHECK(got->relay.egress_id == "eg-7");
  CHECK(got->relay.revision == 42);
  CHECK(got->relay.idle_ms == 1234);
  CHECK(got->relay.drain_left_ms == 5000);
  CHECK(got->relay.flow[0].pending == c.relay.flow[0].pending);
  CHECK(got->relay.flow[0].eof);
  CHECK(got->relay.flow[0].shut);
  CHECK_FALSE(got->relay.flow[0].pipe_r.valid());
  CHECK(got->relay.flow[1].pending == c.relay.flow[1].pending);
  CHECK_FALSE(got->relay.flow[1].eof);
  // The same sockets: what goes in on this side comes out at their peers.
  CHECK(through(got->relay.guest.get(), guest.b.get(), "to guest") == "to guest");
  CHECK(through(got->relay.up.get(), up.b.get(), "to egress") == "to egress");
  // The same pipe, still holding its bytes.
  char buf[32] = {};
  REQUIRE(got->relay.flow[1].pipe_r.valid());
  CHECK(::read(got->relay.flow[1].pipe_r.get(), buf, sizeof buf) == 11);
  CHECK(std::string(buf, 11) == "in the pipe");
}

TEST_CASE("moved connection: a message that does not add up is refused as invalid_argument") {
  Pair link = seqpacket_pair();
  Pair guest = stream_pair(), up = stream_pair();
  const std::vector<int> two{guest.a.get(), up.a.get()};
  struct Bad {
    const char* why;
    std::string detail;
    std::vector<int> fds;
    std::string payload;
  };
  const Bad cases[] = {
      {"bytes missing", "ws eg 1 0 0 5 - 0 -", two, "abc"},
      {"bytes over", "ws eg 1 0 0 1 - 0 -", two, "abc"},
      {"a pipe announced, none sent", "ws eg 1 0 0 0 - 0 p", two, ""},
      {"one socket only", "ws eg 1 0 0 0 - 0 -", {guest.a.get()}, ""},
      {"fields missing", "ws eg 1 0", two, ""},
      {"not a number", "ws eg x 0 0 0 - 0 -", two, ""},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.why);
    REQUIRE(send_handover(link.a.get(), "connection", b.detail, b.fds, b.payload).ok());
    auto m = receive_handover(link.b.get(), std::chrono::seconds(1));
    REQUIRE(m.ok());
    auto c = decode_moved(std::move(m).value());
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == Code::invalid_argument);
  }
}

TEST_CASE("handover: another version is refused as failed_precondition, naming both") {
  Pair link = seqpacket_pair();
  const std::string v1 = "kibotos-handover 1 take-over /run/kibotos/ctrl.sock -";
  REQUIRE(::send(link.a.get(), v1.data(), v1.size(), 0) == static_cast<ssize_t>(v1.size()));
  auto m = receive_handover(link.b.get(), std::chrono::seconds(1));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == Code::failed_precondition);
  CHECK(m.error().message.find("version 1") != std::string::npos);
  CHECK(m.error().message.find("this one 2") != std::string::npos);
}
