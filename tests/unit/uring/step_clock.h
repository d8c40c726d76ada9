#pragma once
// Steppable time for loop tests: LoopOptions::clock reads it, step() moves it on and
// runs the loop once, so every timer due by then fires (no sleeping in tests).
#include <cstdint>
#include <functional>

#include "uring/loop.h"

namespace kib::test {

struct StepClock {
  uint64_t now = 1'000'000;
  std::function<uint64_t()> fn() {
    return [this] { return now; };
  }
  // Moves time on by ms and lets the loop see it (a posted no-op wakes it).
  void step(uring::Loop& l, uint64_t ms) {
    now += ms;
    l.post([] {});
    l.run_once();
  }
};

}  // namespace kib::test
