#pragma once
// "Did you mean": the known names closest to a mistyped one, for usage errors.
#include <string>
#include <string_view>
#include <vector>

namespace kib::ctl {

// The candidates nearest to `typed` by edit distance (a swap of two neighbours counts
// as one edit), only when close enough to be a typo: at most one edit for words of up
// to four letters, two for longer ones. Ties are all returned, in the given order.
std::vector<std::string> closest_names(std::string_view typed, const std::vector<std::string>& candidates);

// "; did you mean 'a'?" (or "'a' or 'b'"), each name between `prefix` and `suffix`;
// empty when nothing is close.
std::string did_you_mean(std::string_view typed, const std::vector<std::string>& candidates,
                         std::string_view prefix = "'", std::string_view suffix = "'");

}  // namespace kib::ctl
