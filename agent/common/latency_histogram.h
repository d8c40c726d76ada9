#pragma once
// A latency histogram the data-plane loops write (relaxed atomics, no lock) and the
// metrics endpoint reads, with a fixed bucket layout from 100 µs to 10 s: a loopback
// connect takes tens of µs, a SOCKS5 server across an ocean hundreds of ms, a dial
// that waits out a timeout seconds.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kib {

class LatencyHistogram {
 public:
  // Upper bounds (µs, inclusive) of the finite buckets; Prometheus' le labels.
  static constexpr std::array<uint64_t, 16> kBoundsUs = {100,     250,     500,     1000,    2500,   5000,
                                                         10000,   25000,   50000,   100000,  250000, 500000,
                                                         1000000, 2500000, 5000000, 10000000};
  static constexpr size_t kBuckets = kBoundsUs.size() + 1;  // + the +Inf bucket

  void observe_us(uint64_t us) {
    size_t i = 0;
    while (i < kBoundsUs.size() && us > kBoundsUs[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(us, std::memory_order_relaxed);
  }

  struct Snapshot {
    std::array<uint64_t, kBuckets> cumulative{};  // observations <= each bound; the last is the count
    uint64_t sum_us = 0;
    uint64_t count() const { return cumulative.back(); }
  };
  // Not one atomic read: a scrape racing a write may see its bucket without its sum,
  // never a count that disagrees with the buckets (the count is their total).
  Snapshot snapshot() const {
    Snapshot s;
    uint64_t running = 0;
    for (size_t i = 0; i < kBuckets; ++i) s.cumulative[i] = running += counts_[i].load(std::memory_order_relaxed);
    s.sum_us = sum_us_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> sum_us_{0};
};

}  // namespace kib
