#include "agent/ctl/suggest.h"

#include <algorithm>

namespace kib::ctl {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
// adjacent letters ("lsit" is one edit from "list").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::vector<std::string> closest_names(std::string_view typed, const std::vector<std::string>& candidates) {
  const size_t limit = typed.size() <= 4 ? 1 : 2;
  size_t best = limit + 1;
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (d == 0 || d > limit || d > best) continue;  // d == 0: not a typo of this one
    if (d < best) out.clear();
    best = d;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::string did_you_mean(std::string_view typed, const std::vector<std::string>& candidates, std::string_view prefix,
                         std::string_view suffix) {
  const auto names = closest_names(typed, candidates);
  if (names.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += prefix;
    out += names[i];
    out += suffix;
  }
  return out + "?";
}

}  // namespace kib::ctl
