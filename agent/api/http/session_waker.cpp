#include "agent/api/http/session_waker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "agent/common/errno_error.h"

namespace kib::api {

Result<std::shared_ptr<SessionWaker>> SessionWaker::create() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) return errno_error("eventfd");
  return std::shared_ptr<SessionWaker>(new SessionWaker(std::move(fd)));
}

void SessionWaker::wake() const {
  const uint64_t one = 1;
  // EAGAIN only when the counter is near 2^64: the session is woken already.
  (void)!::write(fd_.get(), &one, sizeof one);
}

void SessionWaker::clear() const {
  uint64_t count = 0;
  (void)!::read(fd_.get(), &count, sizeof count);
}

void SessionWaker::stop() {
  stopping_.store(true);
  wake();
}

}  // namespace kib::api
