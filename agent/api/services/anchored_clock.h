#pragma once
// A wall clock that steps of the system clock (NTP stepping it, `date -s`) do not
// move: the wall time when it was made plus the steady time since. For what must
// count real elapsed time, such as how long a command ID is remembered ("at least
// 24 h", API.md), within one process; a restart takes the wall clock up again.
#include <chrono>
#include <functional>

namespace kib::api {

using WallNow = std::function<std::chrono::system_clock::time_point()>;
using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;

inline WallNow anchored_clock(const WallNow& wall, SteadyNow steady) {
  const auto wall0 = wall();
  const auto steady0 = steady();
  return [wall0, steady0, steady = std::move(steady)] {
    return wall0 + std::chrono::duration_cast<std::chrono::system_clock::duration>(steady() - steady0);
  };
}

}  // namespace kib::api
