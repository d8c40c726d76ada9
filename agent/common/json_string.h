#pragma once
// JSON string escaping (RFC 8259 section 7): quotes, backslash and control bytes;
// for log lines built by hand (the JSON log format, the access log).
#include <cstdio>
#include <string_view>

namespace kib {

// out: a std::string or an fmt memory buffer (append(first, last), push_back).
template <typename Out>
void append_json_string(Out& out, std::string_view s) {
  auto add = [&](std::string_view t) { out.append(t.data(), t.data() + t.size()); };
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': add("\\\""); break;
      case '\\': add("\\\\"); break;
      case '\n': add("\\n"); break;
      case '\r': add("\\r"); break;
      case '\t': add("\\t"); break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          add(buf);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

}  // namespace kib
