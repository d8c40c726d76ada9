#pragma once
// Asks the SOCKS5 server of each published Egress revision, once, whether it reads
// requests sent together with the greeting (relay/socks5_pipelining_probe.h), and
// sets the revision's socks_pipelining from the answer. A thread of its own: no loop
// and no API call waits for a probe. A server that could not be asked (down, its name
// not resolving) is asked again every 30 s while the revision is in use.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/relay/dial_target.h"
#include "agent/relay/socks5_pipelining_probe.h"

namespace kib::dataplane {

class PipeliningProber {
 public:
  explicit PipeliningProber(relay::ProbeOptions options);
  ~PipeliningProber();  // a probe under way ends within ~100 ms

  void probe(const relay::DialTargetPtr& target);

 private:
  using Clock = std::chrono::steady_clock;
  struct Item {
    std::weak_ptr<const relay::DialTarget> target;  // a revision no longer used is not asked
    Clock::time_point due;
  };
  bool next(Item& item, const std::stop_token& stop);
  void ask(const Item& item, const std::stop_token& stop);
  void run(const std::stop_token& stop);

  const relay::ProbeOptions options_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> queue_;
  std::jthread thread_;  // last: it starts once the members above exist
};

}  // namespace kib::dataplane
