#include "agent/api/services/apply_order.h"

#include <utility>

namespace kib::api {

ApplyOrder::Ticket ApplyOrder::take(std::string key) {
  std::lock_guard lk(mu_);
  pending_.push_back({std::move(key)});
  return Ticket(this, std::prev(pending_.end()));
}

size_t ApplyOrder::pending() const {
  std::lock_guard lk(mu_);
  return pending_.size();
}

bool ApplyOrder::runnable(std::list<Ticket::Entry>::iterator it) const {
  for (auto e = pending_.begin(); e != it; ++e)
    if (it->key.empty() || e->key.empty() || e->key == it->key) return false;
  return true;
}

void ApplyOrder::Ticket::wait() {
  std::unique_lock lk(order_->mu_);
  order_->cv_.wait(lk, [&] { return order_->runnable(it_); });
}

void ApplyOrder::Ticket::finish() {
  if (!order_) return;
  {
    std::lock_guard lk(order_->mu_);
    order_->pending_.erase(it_);
  }
  order_->cv_.notify_all();
  order_ = nullptr;
}

}  // namespace kib::api
