#include "agent/dataplane/pipelining_prober.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace kib::dataplane {

namespace {
constexpr auto kRetry = std::chrono::seconds(30);
}  // namespace

PipeliningProber::PipeliningProber(relay::ProbeOptions options)
    : options_(std::move(options)), thread_([this](std::stop_token stop) { run(stop); }) {}

PipeliningProber::~PipeliningProber() {
  thread_.request_stop();
  cv_.notify_all();
}

void PipeliningProber::probe(const relay::DialTargetPtr& target) {
  if (target->tls) return;  // not probed inside TLS: dials stay one request per reply
  {
    std::lock_guard lk(mu_);
    queue_.push_back(Item{target, Clock::now()});
  }
  cv_.notify_all();
}

// The earliest item once it is due; false when stopping.
bool PipeliningProber::next(Item& item, const std::stop_token& stop) {
  std::unique_lock lk(mu_);
  while (!stop.stop_requested()) {
    auto earliest =
        std::min_element(queue_.begin(), queue_.end(), [](const Item& a, const Item& b) { return a.due < b.due; });
    if (earliest != queue_.end() && earliest->due <= Clock::now()) {
      item = std::move(*earliest);
      queue_.erase(earliest);
      return true;
    }
    const size_t queued = queue_.size();
    auto changed = [&] { return queue_.size() != queued; };
    if (earliest == queue_.end())
      cv_.wait(lk, stop, changed);
    else
      cv_.wait_until(lk, stop, earliest->due, changed);
  }
  return false;
}

void PipeliningProber::ask(const Item& item, const std::stop_token& stop) {
  auto target = item.target.lock();
  if (!target) return;
  auto answered = relay::probe_socks5_pipelining(*target, options_, stop);
  const std::string who = "egress " + target->egress_id() + " revision " + std::to_string(target->revision_number());
  if (answered.ok()) {
    target->socks_pipelining.store(*answered, std::memory_order_relaxed);
    if (*answered)
      spdlog::info("{}: its SOCKS5 server reads requests sent with the greeting; dials send them at once", who);
    else
      spdlog::info("{}: its SOCKS5 server does not read requests sent with the greeting; dials wait for each reply",
                   who);
    return;
  }
  if (answered.error().code == Code::canceled) return;
  spdlog::info("{}: asking its SOCKS5 server about pipelined requests failed ({}); again in {} s", who,
               answered.error().message, kRetry.count());
  std::lock_guard lk(mu_);
  queue_.push_back(Item{item.target, Clock::now() + kRetry});
}

void PipeliningProber::run(const std::stop_token& stop) {
  Item item;
  while (next(item, stop)) ask(item, stop);
}

}  // namespace kib::dataplane
