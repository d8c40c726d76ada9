#pragma once
// The guest side of interception: the transparent UDP and TCP sockets TPROXY
// delivers the guest's DNS to (opened in the workspace namespace by netns/), and the
// guest's DNS-over-TCP connections accepted on them.
//
// Each lives on one uring::Loop; close() stops every event and the object deletes
// itself after the CQE of each operation it submitted.
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>

#include "agent/common/unique_fd.h"
#include "agent/dns/dns_message.h"
#include "agent/dns/socket_address.h"
#include "agent/dns/tcp_framing.h"
#include "uring/loop.h"
#include "uring/op_owner.h"
#include "uring/socket_handle.h"

namespace kib::dns {

class GuestEvents {
 public:
  // A query over UDP from guest to asked (the original destination).
  virtual void on_guest_udp_query(const SocketAddress& guest, const SocketAddress& asked, ByteView query) = 0;
  // A new guest TCP connection to asked.
  virtual void on_guest_tcp_accept(UniqueFd fd, const SocketAddress& guest, const SocketAddress& asked) = 0;
  // A query on guest TCP connection `connection`.
  virtual void on_guest_tcp_query(uint64_t connection, ByteView query) = 0;
  // The connection is gone (EOF with nothing pending, error, idle).
  virtual void on_guest_tcp_closed(uint64_t connection) = 0;

 protected:
  ~GuestEvents() = default;
};

class GuestSocket : protected uring::OpOwner {
 public:
  void close();

 protected:
  GuestSocket(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live);
  virtual ~GuestSocket();
  bool closed() const { return closing(); }
  // Deleted from the loop, not here: close() may run inside the owner's own event.
  void on_released() override;

  GuestEvents* events_;
  uring::SocketHandle socket_;

 private:
  size_t* live_;
};

struct GuestSocketCloser {
  void operator()(GuestSocket* s) const { s->close(); }
};
template <typename T>
using GuestPtr = std::unique_ptr<T, GuestSocketCloser>;

// recvmsg with the original destination from IP_ORIGDSTADDR / IPV6_ORIGDSTADDR.
class GuestUdpListener final : public GuestSocket {
 public:
  static GuestPtr<GuestUdpListener> start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live);

 private:
  using GuestSocket::GuestSocket;
  void arm();
  void on_complete(unsigned tag, int32_t res, uint32_t flags) override;

  msghdr msg_{};
  iovec iov_{};
  sockaddr_storage src_{};
  alignas(cmsghdr) std::array<char, 256> control_{};
  std::array<uint8_t, 4096> buf_{};
};

// Accepts guest DNS-over-TCP connections; getsockname() gives the original destination.
class GuestTcpListener final : public GuestSocket {
 public:
  static GuestPtr<GuestTcpListener> start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live);

 private:
  using GuestSocket::GuestSocket;
  void arm();
  void on_complete(unsigned tag, int32_t res, uint32_t flags) override;

  sockaddr_storage peer_{};
  socklen_t peer_len_ = 0;
};

// One guest DNS-over-TCP connection: frames in, framed answers out (in any order,
// RFC 7766 7). Bounded: unsent answers beyond a limit close it.
class GuestTcpConnection final : public GuestSocket {
 public:
  static GuestPtr<GuestTcpConnection> start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, uint64_t id,
                                            size_t* live);
  void send_answer(ByteView message);
  // Answers still owed; the connection closes after EOF once none is.
  void query_finished();
  void query_started() { ++owed_; }
  // Nothing owed or unsent, and no byte from the guest since `since_ms`.
  bool idle_since(uint64_t since_ms) const {
    return owed_ == 0 && out_.empty() && sending_.empty() && last_activity_ms_ < since_ms;
  }

 private:
  GuestTcpConnection(uring::Loop& loop, GuestEvents& events, UniqueFd fd, uint64_t id, size_t* live)
      : GuestSocket(loop, events, std::move(fd), live), id_(id) {}
  enum Tag : unsigned { kRecv = 0, kSend = 1 };
  void arm_recv();
  void flush();
  void finish(bool reset);
  void on_complete(unsigned tag, int32_t res, uint32_t flags) override;

  uint64_t id_;
  FrameReassembler frames_;
  Bytes out_;
  Bytes sending_;
  size_t owed_ = 0;
  bool eof_ = false;
  bool finished_ = false;
  uint64_t last_activity_ms_ = 0;
  std::array<uint8_t, 4096> buf_{};
};

}  // namespace kib::dns
