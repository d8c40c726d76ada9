#include "agent/dns/dns_counters.h"

namespace kib::dns {

std::string_view failure_reason_name(FailureReason r) {
  switch (r) {
    case FailureReason::inflight_cap: return "inflight_cap";
    case FailureReason::malformed_query: return "malformed_query";
    case FailureReason::malformed_answer: return "malformed_answer";
    case FailureReason::unknown_answer: return "unknown_answer";
    case FailureReason::upstream_error: return "upstream_error";
    case FailureReason::timeout: return "timeout";
    case FailureReason::count_: break;
  }
  return "unknown";
}

}  // namespace kib::dns
