#pragma once
// Per-workspace DNS counters, shown in status and metrics.
#include <array>
#include <cstdint>
#include <string_view>

namespace kib::dns {

enum class FailureReason : uint8_t {
  inflight_cap,      // the workspace's in-flight cap was reached
  malformed_query,   // the guest sent something that is not one DNS question
  malformed_answer,  // a resolver sent something that is not a DNS answer
  unknown_answer,    // an answer to no query in flight on that channel (late or spoofed)
  upstream_error,    // every resolver failed: send error, association or connection lost
  timeout,           // every resolver timed out
  count_,
};

constexpr size_t kFailureReasonCount = static_cast<size_t>(FailureReason::count_);

std::string_view failure_reason_name(FailureReason r);

struct DnsCounters {
  uint64_t queries = 0;       // accepted from guests
  uint64_t answers = 0;       // answers from resolvers delivered to guests
  uint64_t timeouts = 0;      // attempts that timed out (each may fail over)
  uint64_t failovers = 0;     // queries moved to the next resolver
  uint64_t query_bytes = 0;   // DNS message bytes of the queries accepted (no TCP length prefix)
  uint64_t answer_bytes = 0;  // ... of the answers delivered
  std::array<uint64_t, kFailureReasonCount> failures{};

  void fail(FailureReason r) { ++failures[static_cast<size_t>(r)]; }
  uint64_t failed(FailureReason r) const { return failures[static_cast<size_t>(r)]; }
};

}  // namespace kib::dns
