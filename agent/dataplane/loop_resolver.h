#pragma once
// policy::AsyncResolver (c-ares) driven by one io_uring loop: a poll operation per
// socket c-ares watches, one timer for its timeouts. "Resolve the Egress host with
// c-ares on every dial" without a thread hop.
#include <map>
#include <memory>
#include <string>

#include "agent/policy/async_resolver.h"
#include "uring/loop.h"
#include "uring/op_owner.h"

namespace kib::dataplane {

class LoopResolver final : private uring::TimerHandler {
 public:
  static Result<std::unique_ptr<LoopResolver>> create(uring::Loop& loop, const policy::ResolverOptions& options);
  ~LoopResolver();
  LoopResolver(const LoopResolver&) = delete;
  LoopResolver& operator=(const LoopResolver&) = delete;

  // cb runs on the loop thread, possibly before resolve() returns.
  void resolve(const std::string& host, policy::AsyncResolver::Callback cb);
  // True when no poll operation is in flight (the loop may exit).
  size_t pending() const { return ares_->pending(); }
  // Outlives the resolver: orphaned polls still in flight (the loop may exit at 0).
  std::shared_ptr<const size_t> polls_in_flight() const { return polls_in_flight_; }

 private:
  class Watch;
  explicit LoopResolver(uring::Loop& loop) : loop_(loop), timer_(this) {}
  void on_socket(const policy::AsyncResolver::SocketInterest& s);
  void on_ready(Watch& w, int32_t res);
  void on_timer(uring::Timer&) override;
  void rearm_timer();

  uring::Loop& loop_;
  std::unique_ptr<policy::AsyncResolver> ares_;
  std::map<int, Watch*> watches_;  // live watches by fd; orphans free themselves
  uring::Timer timer_;
  std::shared_ptr<size_t> polls_in_flight_ = std::make_shared<size_t>(0);
};

}  // namespace kib::dataplane
