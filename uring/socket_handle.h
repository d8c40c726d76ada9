#pragma once
// The one owner of a socket the loop works on: a plain fd, a direct-descriptor slot
// of the loop's FileSlots, or both (a slot's socket with a plain fd installed for the
// calls that need one, splice(2)). Move-only; closing (or destroying) it closes both,
// with an RST when reset_on_close() was called.
#include <liburing.h>

#include <utility>

#include "agent/common/unique_fd.h"

namespace kib::uring {

class Loop;

class SocketHandle {
 public:
  SocketHandle() = default;
  explicit SocketHandle(UniqueFd fd) : fd_(std::move(fd)) {}
  // The socket that an SQE opens into `slot` (taken from loop.slots()).
  static SocketHandle in_slot(Loop& loop, int slot) {
    SocketHandle h;
    h.loop_ = &loop;
    h.slot_ = slot;
    return h;
  }
  ~SocketHandle() { close(); }
  SocketHandle(SocketHandle&& o) noexcept
      : loop_(o.loop_), fd_(std::move(o.fd_)), slot_(std::exchange(o.slot_, -1)), reset_(o.reset_) {}
  SocketHandle& operator=(SocketHandle&& o) noexcept {
    if (this != &o) {
      close();
      loop_ = o.loop_;
      fd_ = std::move(o.fd_);
      slot_ = std::exchange(o.slot_, -1);
      reset_ = o.reset_;
    }
    return *this;
  }
  SocketHandle(const SocketHandle&) = delete;
  SocketHandle& operator=(const SocketHandle&) = delete;

  bool valid() const { return fd_.valid() || slot_ >= 0; }
  // The plain fd (-1: a slot's socket without one yet).
  int fd() const { return fd_.get(); }
  int slot() const { return slot_; }
  // A slot's socket got a plain fd (IORING_OP_FIXED_FD_INSTALL's result).
  void set_fd(UniqueFd fd) { fd_ = std::move(fd); }
  // Gives up the plain fd (the socket lives on in it); a slot stays until close().
  UniqueFd take_fd() { return std::move(fd_); }
  // Points an SQE at the socket, by its slot when it has one. After the prep helper.
  void aim(io_uring_sqe* s) const {
    if (slot_ >= 0) {
      s->fd = slot_;
      s->flags |= IOSQE_FIXED_FILE;
    } else {
      s->fd = fd_.get();
    }
  }
  // The close sends an RST (SO_LINGER 0), not a FIN.
  void reset_on_close();
  void close();

 private:
  Loop* loop_ = nullptr;
  UniqueFd fd_;
  int slot_ = -1;
  bool reset_ = false;
};

}  // namespace kib::uring
