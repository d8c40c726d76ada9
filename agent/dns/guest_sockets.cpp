#include "agent/dns/guest_sockets.h"

#include <netinet/in.h>
#include <unistd.h>

#include <cstring>

namespace kib::dns {
namespace {

constexpr size_t kMaxUnsentAnswerBytes = 256 * 1024;

}  // namespace

GuestSocket::GuestSocket(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live)
    : uring::OpOwner(loop), events_(&events), socket_(std::move(fd)), live_(live) {
  if (live_) ++*live_;
}

GuestSocket::~GuestSocket() {
  if (live_) --*live_;
}

void GuestSocket::close() {
  if (closing()) return;
  events_ = nullptr;
  if (socket_.fd() >= 0) ::shutdown(socket_.fd(), SHUT_RDWR);
  close_ops();  // may release: nothing after it
}

void GuestSocket::on_released() {
  loop_.post([this] { delete this; });
}

// ---- UDP ----

GuestPtr<GuestUdpListener> GuestUdpListener::start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live) {
  // A guest may fire a burst of queries (a browser, a resolver warming up): room for
  // about a thousand before the kernel drops any.
  int bytes = 4 << 20;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  GuestPtr<GuestUdpListener> l(new GuestUdpListener(loop, events, std::move(fd), live));
  l->arm();
  return l;
}

void GuestUdpListener::arm() {
  iov_ = {buf_.data(), buf_.size()};
  msg_ = {};
  msg_.msg_name = &src_;
  msg_.msg_namelen = sizeof src_;
  msg_.msg_iov = &iov_;
  msg_.msg_iovlen = 1;
  msg_.msg_control = control_.data();
  msg_.msg_controllen = control_.size();
  io_uring_sqe* sqe = start_op(0);
  io_uring_prep_recvmsg(sqe, socket_.fd(), &msg_, 0);
}

void GuestUdpListener::on_complete(unsigned, int32_t res, uint32_t) {
  if (closed()) return;
  if (res >= 0 && (msg_.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0) {
    const SocketAddress guest = SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&src_));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg_); c != nullptr; c = CMSG_NXTHDR(&msg_, c)) {
      const bool v4 = c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR;
      const bool v6 = c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_ORIGDSTADDR;
      if (!v4 && !v6) continue;
      sockaddr_storage asked{};
      std::memcpy(&asked, CMSG_DATA(c), v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
      events_->on_guest_udp_query(guest, SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&asked)),
                                  ByteView(buf_.data(), static_cast<size_t>(res)));
      break;
    }
  }
  // Errors on a UDP listener (ICMP errors, ENOMEM) concern one datagram: keep going.
  if (!closed()) arm();
}

// ---- TCP listener ----

GuestPtr<GuestTcpListener> GuestTcpListener::start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, size_t* live) {
  GuestPtr<GuestTcpListener> l(new GuestTcpListener(loop, events, std::move(fd), live));
  l->arm();
  return l;
}

void GuestTcpListener::arm() {
  peer_len_ = sizeof peer_;
  io_uring_sqe* sqe = start_op(0);
  io_uring_prep_accept(sqe, socket_.fd(), reinterpret_cast<sockaddr*>(&peer_), &peer_len_,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
}

void GuestTcpListener::on_complete(unsigned, int32_t res, uint32_t) {
  // Owned at once: a connection accepted as the listener closes is closed, not leaked.
  UniqueFd conn(res >= 0 ? res : -1);
  if (closed()) return;
  if (conn) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (getsockname(conn.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      events_->on_guest_tcp_accept(std::move(conn), SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&peer_)),
                                   SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&local)));
    }
  }
  // EMFILE and friends: the next accept retries; the guest's SYN waits in the backlog.
  if (!closed()) arm();
}

// ---- TCP connection ----

GuestPtr<GuestTcpConnection> GuestTcpConnection::start(uring::Loop& loop, GuestEvents& events, UniqueFd fd, uint64_t id,
                                                       size_t* live) {
  GuestPtr<GuestTcpConnection> c(new GuestTcpConnection(loop, events, std::move(fd), id, live));
  c->last_activity_ms_ = loop.now_ms();
  c->arm_recv();
  return c;
}

void GuestTcpConnection::arm_recv() {
  io_uring_sqe* sqe = start_op(kRecv);
  io_uring_prep_recv(sqe, socket_.fd(), buf_.data(), buf_.size(), 0);
}

void GuestTcpConnection::send_answer(ByteView message) {
  if (closed() || finished_) return;
  if (out_.size() + message.size() > kMaxUnsentAnswerBytes) return finish(true);  // not reading
  if (!append_frame(out_, message).ok()) return;
  flush();
}

void GuestTcpConnection::query_finished() {
  if (owed_ > 0) --owed_;
  if (eof_ && owed_ == 0 && out_.empty() && sending_.empty()) finish(false);
}

void GuestTcpConnection::flush() {
  if (!sending_.empty() || out_.empty()) return;
  sending_.swap(out_);
  io_uring_sqe* sqe = start_op(kSend);
  io_uring_prep_send(sqe, socket_.fd(), sending_.data(), sending_.size(), MSG_NOSIGNAL);
}

void GuestTcpConnection::finish(bool reset) {
  if (finished_) return;
  finished_ = true;
  if (reset) socket_.reset_on_close();
  events_->on_guest_tcp_closed(id_);  // the owner closes us
}

void GuestTcpConnection::on_complete(unsigned tag, int32_t res, uint32_t) {
  if (closed()) return;
  if (tag == kSend) {
    if (res < 0) return finish(true);
    if (static_cast<size_t>(res) < sending_.size()) {
      Bytes rest(sending_.begin() + res, sending_.end());
      rest.insert(rest.end(), out_.begin(), out_.end());
      out_.swap(rest);
    }
    sending_.clear();
    flush();
    if (eof_ && owed_ == 0 && out_.empty() && sending_.empty()) finish(false);
    return;
  }
  if (res <= 0) {
    if (res < 0) return finish(true);
    eof_ = true;
    if (owed_ == 0 && out_.empty() && sending_.empty()) finish(false);
    return;
  }
  last_activity_ms_ = loop_.now_ms();
  frames_.feed(ByteView(buf_.data(), static_cast<size_t>(res)));
  for (;;) {
    auto next = frames_.next();
    if (!next.ok()) return finish(true);
    if (!next->has_value()) break;
    events_->on_guest_tcp_query(id_, **next);
    if (closed() || finished_) return;
  }
  arm_recv();
}

}  // namespace kib::dns
