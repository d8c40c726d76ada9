// Fuzz target: the agent's config file (agent/config/config.cpp, yaml-cpp under it).
// Root writes it, but a crash or a silently half-read file at start-up is an outage,
// and yaml-cpp has had recursion and parsing bugs. Checked beyond not crashing: a
// refusal says why, and a file read again over the configuration it produced is
// accepted and changes nothing (keys a file sets win, the rest keep the defaults
// given), which also holds parsing to one result per file. Two parses per input:
// yaml-cpp under ASan runs a few hundred a second.
#include <string>

#include "agent/config/config.h"
#include "tests/fuzz/fuzz_input.h"

using kib::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;  // a config file is small; longer inputs only slow yaml-cpp
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = kib::parse_config(text);
  if (!c.ok()) {
    require(!c.error().message.empty(), "a refusal says why");
    return 0;
  }
  const auto values = kib::config_values(*c);
  auto layered = kib::parse_config(text, *c);
  require(layered.ok() && kib::config_values(*layered) == values, "a file read over its own result changes nothing");
  return 0;
}
