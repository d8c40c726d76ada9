#pragma once
// The CallWaker of one connection: an eventfd its session polls beside its socket, so
// that another thread reaches a session blocked waiting for the client without a lock
// on the data plane. The server holds it too, to tell the session the agent is
// stopping. Shared: whoever may still wake the session keeps the eventfd open.
#include <atomic>
#include <memory>

#include "agent/api/http/call_waker.h"
#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::api {

class SessionWaker final : public CallWaker {
 public:
  static Result<std::shared_ptr<SessionWaker>> create();

  void wake() const override;
  // The session: takes the wakes so far (the next poll waits again).
  void clear() const;
  int fd() const { return fd_.get(); }

  // The server: the agent stops (or hands over); the session ends the streams that
  // wait for events. Wakes the session.
  void stop();
  bool stopping() const { return stopping_.load(); }

  // The session, before it waits: how many of its streams wait for events (a health
  // Watch). The server gives those a moment to end at stop.
  void set_waiting_streams(size_t n) { waiting_streams_.store(n); }
  size_t waiting_streams() const { return waiting_streams_.load(); }

 private:
  explicit SessionWaker(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> waiting_streams_{0};
};

}  // namespace kib::api
