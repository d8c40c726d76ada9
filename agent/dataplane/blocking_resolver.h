#pragma once
// Endpoint resolution off the loops: a small pool of threads calling
// policy::resolve_host (c-ares, bounded by its timeout). Pending lookups are capped;
// beyond the cap a dial fails at once rather than queueing without bound.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/dataplane/worker.h"
#include "agent/policy/name_resolver.h"

namespace kib::dataplane {

class BlockingResolver {
 public:
  BlockingResolver(policy::ResolverOptions options, unsigned threads, size_t max_pending);
  ~BlockingResolver();
  void resolve(const std::string& host, ResolveCallback cb);

 private:
  void run();
  policy::ResolverOptions options_;
  size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, ResolveCallback>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kib::dataplane
