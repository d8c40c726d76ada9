#include "netns/nft_wire.h"

#include <sys/socket.h>

#include <array>
#include <cstring>

#include "agent/common/errno_error.h"

namespace kib::netns {
namespace {

// A request's header: op and the sizes of the two strings that follow. A reply's:
// code, flags (kHasOutput, kHasGeneration), the size of its text, the generation.
using Header = std::array<uint32_t, 3>;
using ReplyHeader = std::array<uint32_t, 4>;
constexpr uint32_t kHasOutput = 1, kHasGeneration = 2;
// Well above any table the agent writes (a policy's prefixes are bounded by the API),
// so a corrupt length cannot make either side allocate without bound.
constexpr uint32_t kMaxText = 64u << 20;

Error peer_error(const char* what, int err) {
  if (err == 0) return make_error(Code::unavailable, std::string(what) + ": the peer closed the socket");
  return errno_error(what, err, err == EAGAIN ? Code::deadline_exceeded : Code::unavailable);
}

Status send_all(int sock, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::send(sock, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return peer_error("send to nft helper", n < 0 ? errno : EPIPE);
    data += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

Status recv_all(int sock, char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::recv(sock, data, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return peer_error("receive from nft helper", n < 0 ? errno : 0);
    data += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

// A message of one header buffer with room for one fd in its control data.
struct FdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  explicit FdMessage(Header& h) : iov{h.data(), sizeof h} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;  // msg points into this object
  FdMessage& operator=(const FdMessage&) = delete;
};

Result<std::string> recv_text(int sock, uint32_t len) {
  if (len > kMaxText) return make_error(Code::internal, "nft helper frame too large");
  std::string s(len, '\0');
  KIB_TRY(recv_all(sock, s.data(), s.size()));
  return s;
}

}  // namespace

Status send_nft_request(int sock, int ns_fd, const NftRequest& req) {
  Header h{static_cast<uint32_t>(req.op), static_cast<uint32_t>(req.text.size()),
           static_cast<uint32_t>(req.list.size())};
  FdMessage m(h);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &ns_fd, sizeof ns_fd);
  ssize_t n;
  do n = ::sendmsg(sock, &m.msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) return peer_error("send to nft helper", errno);
  // The fd went with the first byte; the rest of the header is plain data.
  KIB_TRY(send_all(sock, reinterpret_cast<const char*>(h.data()) + n, sizeof h - static_cast<size_t>(n)));
  KIB_TRY(send_all(sock, req.text.data(), req.text.size()));
  return send_all(sock, req.list.data(), req.list.size());
}

Result<std::pair<UniqueFd, NftRequest>> recv_nft_request(int sock) {
  Header h{};
  FdMessage m(h);
  ssize_t n;
  do n = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return peer_error("receive from agent", n < 0 ? errno : 0);
  UniqueFd ns;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      ns.reset(fd);
    }
  }
  if (!ns) return make_error(Code::internal, "nft helper request without a namespace fd");
  KIB_TRY(recv_all(sock, reinterpret_cast<char*>(h.data()) + n, sizeof h - static_cast<size_t>(n)));
  NftRequest req;
  req.op = static_cast<NftOp>(h[0]);
  auto text = recv_text(sock, h[1]);
  if (!text.ok()) return std::move(text).error();
  auto list = recv_text(sock, h[2]);
  if (!list.ok()) return std::move(list).error();
  req.text = std::move(*text);
  req.list = std::move(*list);
  return std::pair{std::move(ns), std::move(req)};
}

Status send_nft_reply(int sock, const NftReply& reply) {
  const std::string& body =
      reply.status.ok() ? (reply.output ? *reply.output : std::string()) : reply.status.error().message;
  const uint32_t flags = (reply.output ? kHasOutput : 0) | (reply.generation ? kHasGeneration : 0);
  ReplyHeader h{reply.status.ok() ? 0u : static_cast<uint32_t>(reply.status.error().code), flags,
                static_cast<uint32_t>(body.size()), reply.generation.value_or(0)};
  KIB_TRY(send_all(sock, reinterpret_cast<const char*>(h.data()), sizeof h));
  return send_all(sock, body.data(), body.size());
}

Result<NftReply> recv_nft_reply(int sock) {
  ReplyHeader h{};
  KIB_TRY(recv_all(sock, reinterpret_cast<char*>(h.data()), sizeof h));
  auto body = recv_text(sock, h[2]);
  if (!body.ok()) return std::move(body).error();
  NftReply reply;
  if (h[0] != 0) {
    reply.status = Error{static_cast<Code>(h[0]), std::move(*body)};
  } else {
    if (h[1] & kHasOutput) reply.output = std::move(*body);
    if (h[1] & kHasGeneration) reply.generation = h[3];
  }
  return reply;
}

}  // namespace kib::netns
