#include "agent/daemon/handover.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/common/errno_error.h"
#include "agent/common/unix_address.h"

namespace kib::daemon {
namespace {

constexpr const char* kMagic = "kibotos-handover";
constexpr size_t kMaxFds = 200;

// A moved relay's message is far above the default socket buffer (it bounds a
// SEQPACKET message); sends time out rather than hang on a peer that stopped reading.
void size_for_handover(int fd) {
  const int bytes = 2 * static_cast<int>(kMaxHandoverMessage);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  const timeval t{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

}  // namespace

std::string handover_socket_path(const std::string& state_dir) { return state_dir + "/handover.sock"; }

Status send_handover(int sock, const std::string& op, const std::string& detail, const std::vector<int>& fds,
                     const std::string& payload) {
  std::string text = std::string(kMagic) + " " + std::to_string(kHandoverVersion) + " " + op;
  if (!detail.empty()) text += " " + detail;
  if (!payload.empty()) text += "\n" + payload;
  if (text.size() > kMaxHandoverMessage) return Error{Code::internal, "handover: " + op + " message too long"};
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    if (fds.size() > kMaxFds) return Error{Code::internal, "too many fds for one handover message"};
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) return errno_error("handover: send " + op, errno, Code::unavailable);
  return {};
}

Result<HandoverMessage> receive_handover(int sock, std::chrono::milliseconds timeout) {
  pollfd p{sock, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready < 0) return errno_error("handover: poll", errno, Code::unavailable);
  if (ready == 0)
    return Error{Code::unavailable, "handover: no answer within " + std::to_string(timeout.count()) + " ms"};
  std::string buf(kMaxHandoverMessage, '\0');
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return errno_error("handover: receive", errno, Code::unavailable);
  HandoverMessage out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out.fds.emplace_back(fd);  // owned at once, also when the message is refused below
    }
  }
  if (n == 0) return Error{Code::unavailable, "handover: the other agent closed the connection"};
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return Error{Code::invalid_argument, "handover: message truncated"};
  buf.resize(static_cast<size_t>(n));
  const size_t eol = buf.find('\n');
  if (eol != std::string::npos) {
    out.payload = buf.substr(eol + 1);
    buf.resize(eol);
  }
  std::istringstream words(buf);
  std::string magic;
  int version = 0;
  if (!(words >> magic >> version) || magic != kMagic)
    return Error{Code::invalid_argument, "handover: not a handover message"};
  if (version != kHandoverVersion)
    return Error{Code::failed_precondition, "handover: the other agent speaks version " + std::to_string(version) +
                                                ", this one " + std::to_string(kHandoverVersion)};
  words >> out.op;
  std::getline(words >> std::ws, out.detail);
  return out;
}

Result<HandoverListener> HandoverListener::open(const std::string& state_dir) {
  HandoverListener l;
  l.path_ = handover_socket_path(state_dir);
  KIB_TRY_ASSIGN(auto a, unix_address(l.path_));
  if (::unlink(l.path_.c_str()) != 0 && errno != ENOENT) return errno_error("cannot remove stale " + l.path_);
  l.fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!l.fd_) return errno_error("socket(AF_UNIX, SOCK_SEQPACKET)");
  // Root only: whoever connects can take the API and the store.
  const mode_t old_mask = ::umask(0177);
  const int rc = ::bind(l.fd_.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a);
  ::umask(old_mask);
  if (rc != 0) return errno_error("cannot bind " + l.path_);
  if (::listen(l.fd_.get(), 4) != 0) return errno_error("cannot listen on " + l.path_);
  return l;
}

HandoverListener::~HandoverListener() { close(); }

UniqueFd HandoverListener::accept() const {
  UniqueFd fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (fd) size_for_handover(fd.get());
  return fd;
}

void HandoverListener::close() {
  if (!fd_) return;
  fd_.reset();
  ::unlink(path_.c_str());
}

Result<std::optional<UniqueFd>> connect_handover(const std::string& state_dir) {
  const std::string path = handover_socket_path(state_dir);
  KIB_TRY_ASSIGN(auto a, unix_address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket(AF_UNIX, SOCK_SEQPACKET)");
  size_for_handover(fd.get());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) return std::optional<UniqueFd>{};
    return errno_error("cannot connect to " + path);
  }
  return std::optional<UniqueFd>(std::move(fd));
}

}  // namespace kib::daemon
