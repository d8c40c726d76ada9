#include "agent/dataplane/blocking_resolver.h"

namespace kib::dataplane {

BlockingResolver::BlockingResolver(policy::ResolverOptions options, unsigned threads, size_t max_pending)
    : options_(std::move(options)), max_pending_(max_pending) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

BlockingResolver::~BlockingResolver() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  for (auto& [host, cb] : queue_) cb(Error{Code::unavailable, "resolver stopped"});
}

void BlockingResolver::resolve(const std::string& host, ResolveCallback cb) {
  {
    std::lock_guard lk(mu_);
    if (!stopping_ && queue_.size() < max_pending_) {
      queue_.emplace_back(host, std::move(cb));
      cv_.notify_one();
      return;
    }
  }
  cb(Error{Code::resource_exhausted, "too many endpoint lookups pending"});
}

void BlockingResolver::run() {
  for (;;) {
    std::pair<std::string, ResolveCallback> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.second(policy::resolve_host(job.first, options_));
  }
}

}  // namespace kib::dataplane
