#include "agent/relay/relay_accounting.h"

namespace kib::relay {

std::string_view close_reason_name(CloseReason r) {
  static constexpr std::array<std::string_view, kCloseReasonCount> kNames = {
      "guest_closed", "upstream_closed", "guest_reset", "upstream_reset", "relay_error",
      "idle_timeout", "drain_deadline",  "dial_failed", "agent_closed",   "handed_over"};
  const auto i = static_cast<size_t>(r);
  return i < kNames.size() ? kNames[i] : "unknown";
}

}  // namespace kib::relay
