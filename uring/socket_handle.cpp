#include "uring/socket_handle.h"

#include <sys/socket.h>

#include "uring/loop.h"

namespace kib::uring {

void SocketHandle::reset_on_close() {
  reset_ = true;
  if (!fd_) return;
  const linger l{1, 0};
  (void)setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

void SocketHandle::close() {
  fd_.reset();
  if (slot_ >= 0) loop_->close_slot(std::exchange(slot_, -1), reset_);
  reset_ = false;
}

}  // namespace kib::uring
