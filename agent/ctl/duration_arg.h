#pragma once
// --timeout's value: whole seconds ("30"), or a number with a unit ("30s", "2m",
// "1h"), from 1 second to 24 hours.
#include <cstdint>
#include <string_view>

#include "agent/common/result.h"

namespace kib::ctl {

Result<uint32_t> parse_timeout_seconds(std::string_view v);

}  // namespace kib::ctl
