#pragma once
// How long a bulk (spliced) flow whose source ran dry lets bytes gather before it
// reads again. Each wake-up costs syscalls and a fight for the socket lock with the
// softirq delivering the next segments, so the fewer per byte the better; but a wait
// that outlasts what the flow's receive window holds stalls its sender. A fixed wait
// serves one rate only: 2 ms took ~2 MiB a wake-up from one iperf3 stream at ~1 GB/s
// (4 ms stalled it) but ~0.6 MiB from each of four at ~300 MB/s. So each wait is
// sized from what the previous one gathered, to take about kGatherTarget.
#include <linux/time_types.h>

#include <algorithm>
#include <cstdint>

namespace kib::relay {

inline constexpr uint64_t kGatherTarget = 2u << 20;

// One bulk flow's waits. It lives with the flow's SplicePipe: only bulk flows wait,
// and the connections that never turn bulk (most, and every idle one) carry none.
struct GatherState {
  uint32_t wait_us = 0;    // the last wait (0: the flow waited for readability)
  uint64_t gathered = 0;   // moved since that wait ended
  __kernel_timespec ts{};  // wait_us for the kernel, read when the SQE is submitted
  uint32_t lowat = 0;      // the source's SO_RCVLOWAT while it waits (0: the kernel's 1)
};

// What a wait aims to gather: at most a quarter of the source's receive buffer
// (rcvbuf; 0: unknown), so that a young connection, whose window has not grown yet,
// is never made to wait for more than it can hold.
constexpr uint64_t gather_target(uint64_t rcvbuf) {
  return rcvbuf > 0 ? std::min(kGatherTarget, rcvbuf / 4) : kGatherTarget;
}

// prev_us: the wait that just ended (0: the flow last waited for readability, not
// for a period); gathered: the bytes moved since it ended; rcvbuf: the source's
// receive buffer (0: unknown), for gather_target. Between max_us / 4 (what a fast
// flow waits: shorter waits cost more wake-ups per byte) and max_us; the first wait
// of a burst is max_us.
constexpr uint32_t next_gather_us(uint32_t prev_us, uint64_t gathered, uint32_t max_us, uint64_t rcvbuf) {
  if (prev_us == 0 || gathered == 0) return max_us;
  const uint64_t next = uint64_t{prev_us} * gather_target(rcvbuf) / gathered;
  return static_cast<uint32_t>(std::clamp<uint64_t>(next, std::max(max_us / 4, 1u), max_us));
}

}  // namespace kib::relay
