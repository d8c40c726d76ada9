#pragma once
// List paging: page sizes and tamper-evident page tokens. A token names the last
// creation sequence number returned; the next page starts after it, so concurrent
// creates and deletes never repeat an item or skip one that existed throughout. Its
// HMAC binds it to the resource kind and the label_selector it was issued for.
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/api/conventions/labels.h"
#include "agent/common/result.h"

namespace kib::api {

inline constexpr uint32_t kDefaultPageSize = 100;
inline constexpr uint32_t kMaxPageSize = 1000;

// 0 selects the default; above the maximum is invalid_argument ("rejected rather than
// silently changed").
Result<uint32_t> effective_page_size(uint32_t requested);

std::string make_page_token(std::string_view secret, std::string_view kind, uint64_t last_seq,
                            const StringMap& selector);
// The last_seq of a token; 0 for an empty token. A forged or altered token, or one
// issued for another kind or selector, is invalid_argument.
Result<uint64_t> parse_page_token(std::string_view secret, std::string_view kind, std::string_view token,
                                  const StringMap& selector);

}  // namespace kib::api
