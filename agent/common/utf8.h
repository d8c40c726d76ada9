#pragma once
// UTF-8 validity for text that reaches a client: JSON and gRPC say their strings are
// UTF-8 (RFC 8259 section 8.1), so bytes a request carried are checked before they are
// echoed in an error.
#include <cstddef>
#include <string>
#include <string_view>

namespace kib {

// The length of the longest prefix of `s` that is well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF).
size_t valid_utf8_prefix(std::string_view s);

// `s` with every byte that is not part of a well-formed sequence replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

}  // namespace kib
