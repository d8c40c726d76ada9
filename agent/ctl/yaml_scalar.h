#pragma once
// Lexical classes of plain YAML scalars. Why not leave quoting to yaml-cpp's emitter:
// yaml-cpp 0.7 (Debian 12) quotes only empty strings and the null words itself and
// writes `yes`, `on`, `1.5`, `0x1F` or `1:30` plain, so a string field holding one
// would read back as a bool or a number (yaml_scalar_test checks that this is still
// so). Matched by hand rather than with std::regex:
// std::regex is slow to compile and, under -O2 with ASan, makes GCC 12 report a false
// -Wmaybe-uninitialized inside libstdc++'s std::function.
#include <string_view>

namespace kib::ctl {

// A JSON number (RFC 8259 section 6): -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
bool is_json_number(std::string_view s);

// A plain scalar that YAML (1.1 or 1.2) reads back as something other than a string:
// empty, null/~, booleans (y/yes/on/true and their negatives, in the three cases YAML
// spells), decimal/float numbers with `_` separators, 0x hex, 0/0o octal,
// [-+].inf, .nan and sexagesimal integers (1:30). Such a string must be quoted.
bool reads_as_non_string(std::string_view s);

}  // namespace kib::ctl
