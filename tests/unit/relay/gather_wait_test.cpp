// next_gather_us: the first wait after a burst is the configured maximum; later ones
// are sized from what the previous wait gathered, between max/4 and max, aiming at
// kGatherTarget or a quarter of the receive buffer, whichever is less.
#include <doctest/doctest.h>

#include "agent/relay/gather_wait.h"

using kib::relay::kGatherTarget;
using kib::relay::next_gather_us;

namespace {
constexpr uint64_t kBig = 64u << 20;  // a receive buffer that does not limit the target
}

TEST_CASE("the first wait after waiting for readability is the maximum") {
  CHECK(next_gather_us(0, 0, 8000, kBig) == 8000);
  CHECK(next_gather_us(0, 5u << 20, 8000, kBig) == 8000);
  CHECK(next_gather_us(4000, 0, 8000, kBig) == 8000);
}

TEST_CASE("a flow that gathered more than the target waits less next time") {
  // 8 ms gathered 4 MiB (0.5 MiB/ms): 2 MiB takes 4 ms.
  CHECK(next_gather_us(8000, 4u << 20, 8000, kBig) == 4000);
  // One that gathered exactly the target keeps its wait.
  CHECK(next_gather_us(3000, kGatherTarget, 8000, kBig) == 3000);
  CHECK(next_gather_us(3000, kGatherTarget, 8000, 0) == 3000);  // buffer unknown
}

TEST_CASE("a flow that gathered less than the target waits longer, up to the maximum") {
  CHECK(next_gather_us(2000, 1u << 20, 8000, kBig) == 4000);
  CHECK(next_gather_us(2000, 100, 8000, kBig) == 8000);
}

TEST_CASE("a wait never drops below a quarter of the maximum") {
  CHECK(next_gather_us(8000, 1u << 30, 8000, kBig) == 2000);
  CHECK(next_gather_us(2000, 8u << 20, 8000, kBig) == 2000);
  CHECK(next_gather_us(3, 1u << 30, 3, kBig) == 1);
}

TEST_CASE("a small receive buffer lowers the target to a quarter of it") {
  // 1 MiB buffer: the target is 256 KiB; 4 ms that gathered 512 KiB -> 2 ms.
  CHECK(next_gather_us(4000, 512u << 10, 8000, 1u << 20) == 2000);
  // The same gather with a large buffer would wait the maximum.
  CHECK(next_gather_us(4000, 512u << 10, 8000, kBig) == 8000);
}
