#include "agent/api/reflection/readiness.h"

namespace kib::api {

void Readiness::set(bool ready) {
  std::lock_guard lock(mu_);
  if (ready_.exchange(ready) == ready) return;
  for (const auto& w : watchers_) w->wake();
}

Result<std::unique_ptr<Readiness::Subscription>> Readiness::watch(std::shared_ptr<const CallWaker> waker) {
  std::lock_guard lock(mu_);
  if (watchers_.size() >= kMaxWatchers)
    return Error{Code::resource_exhausted, std::to_string(kMaxWatchers) + " health Watch streams are open already"};
  watchers_.push_front(std::move(waker));
  return std::unique_ptr<Subscription>(new Subscription(*this, watchers_.begin()));
}

size_t Readiness::watchers() const {
  std::lock_guard lock(mu_);
  return watchers_.size();
}

Readiness::Subscription::~Subscription() {
  std::lock_guard lock(owner_.mu_);
  owner_.watchers_.erase(entry_);
}

}  // namespace kib::api
