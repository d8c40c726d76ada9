#include "agent/common/log_rate_limit.h"

namespace kib {

LogRateLimit::Verdict LogRateLimit::admit(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (in_window_ == 0 || now - window_start_ >= window_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return {};
  }
  ++in_window_;
  Verdict v{true, suppressed_};
  suppressed_ = 0;
  return v;
}

}  // namespace kib
