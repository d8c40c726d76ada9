#pragma once
// The agent's readiness as systemd is told it: ready between READY=1 and STOPPING=1,
// and not while it hands over to a new agent. Health/Check reads it; each Health/Watch
// stream subscribes to have its session woken when it changes.
#include <atomic>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>

#include "agent/api/http/call_waker.h"
#include "agent/common/result.h"

namespace kib::api {

class Readiness {
 public:
  // Watch streams open at once, agent-wide. Each costs little, but a client controls
  // how many it opens (HTTP/2 bounds them per connection: 100 streams).
  static constexpr size_t kMaxWatchers = 1000;

  Readiness() = default;
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  bool ready() const { return ready_.load(); }
  // Wakes every watcher when the value changes.
  void set(bool ready);

  // One watcher's registration; it ends with the Watch stream, and the Readiness must
  // outlive it.
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    friend class Readiness;
    using Entry = std::list<std::shared_ptr<const CallWaker>>::iterator;
    Subscription(Readiness& owner, Entry entry) : owner_(owner), entry_(entry) {}
    Readiness& owner_;
    Entry entry_;
  };
  // resource_exhausted beyond kMaxWatchers.
  Result<std::unique_ptr<Subscription>> watch(std::shared_ptr<const CallWaker> waker);
  size_t watchers() const;

 private:
  std::atomic<bool> ready_{false};
  // Guards watchers_ only: taken when a Watch opens or ends and when readiness
  // changes, never by another call.
  mutable std::mutex mu_;
  std::list<std::shared_ptr<const CallWaker>> watchers_;
};

}  // namespace kib::api
