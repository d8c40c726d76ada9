#pragma once
// What relayed connections report to the counters an operator reads: why each one
// ended, the bytes it moved each way, and how long each stage of its dial took.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/common/latency_histogram.h"

namespace kib::relay {

enum class CloseReason : uint8_t {
  guest_closed,     // both sides ended cleanly, the guest's FIN first
  upstream_closed,  // ... the Egress's FIN first
  guest_reset,      // the guest's socket reset or failed (while dialing too)
  upstream_reset,   // after the dial: the Egress's socket reset or failed, or its TLS broke
  relay_error,      // the relay could not go on (out of memory; a pipe failed on both sides)
  idle_timeout,     // no byte either way for dataplane.idle_timeout
  drain_deadline,   // still open when its drain ended
  dial_failed,      // the dial through the Egress failed (the cause is counted apart)
  agent_closed,     // the agent ended it: its Egress or Workspace deleted or let go, the agent stopped
  handed_over,      // moved to the next agent process (take-over, restart), where it goes on
};
inline constexpr size_t kCloseReasonCount = 10;
std::string_view close_reason_name(CloseReason r);

// Bytes of one Workspace's connections through one Egress, application bytes both
// ways (plaintext inside TLS): from_guest as read from the guest, to_guest as written
// to it.
struct TrafficCounters {
  std::atomic<uint64_t> from_guest{0};
  std::atomic<uint64_t> to_guest{0};
};

// One Egress's dial stages (every Workspace's connections, every revision): resolve
// (only a host name), TCP connect (all addresses tried), TLS handshake (full or
// resumed), SOCKS5 (greeting to the CONNECT reply), the whole dial, and from the
// guest's connection to the first byte the Egress sent back through it.
struct DialTimings {
  LatencyHistogram resolve;
  LatencyHistogram connect;
  LatencyHistogram tls_full;
  LatencyHistogram tls_resumed;
  LatencyHistogram socks5;
  LatencyHistogram dial;
  LatencyHistogram first_byte;
};

}  // namespace kib::relay
