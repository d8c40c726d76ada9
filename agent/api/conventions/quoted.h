#pragma once
// A client-supplied string inside an error message: quoted and cut short, so a 1 MiB
// ID cannot make a 1 MiB error.
#include <string>
#include <string_view>

namespace kib::api {

inline std::string quoted(std::string_view s, size_t max = 80) {
  std::string out = "\"";
  out += s.substr(0, max);
  if (s.size() > max) out += "...";
  out += "\"";
  return out;
}

}  // namespace kib::api
