#include "agent/api/grpc/grpc_status.h"

#include <charconv>
#include <cstdint>

#include "agent/common/utf8.h"

namespace kib::api {

int grpc_status_number(Code code) { return static_cast<int>(code); }

std::optional<Code> code_from_grpc_status(std::string_view number) {
  int n = -1;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
  if (n < 0 || n > static_cast<int>(Code::unauthenticated)) return std::nullopt;
  return static_cast<Code>(n);
}

Code code_for_http_status(int http_status) {
  switch (http_status) {
    case 400: return Code::internal;
    case 401: return Code::unauthenticated;
    case 403: return Code::permission_denied;
    case 404: return Code::unimplemented;
    case 429:
    case 502:
    case 503:
    case 504: return Code::unavailable;
    default: return Code::unknown;
  }
}

std::string percent_encode_grpc_message(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

HttpHeaders grpc_status_fields(const Status& status) {
  HttpHeaders out;
  if (status.ok()) {
    out.emplace_back("grpc-status", "0");
    return out;
  }
  out.emplace_back("grpc-status", std::to_string(grpc_status_number(status.error().code)));
  if (!status.error().message.empty())
    // "The value portion of Status-Message is conceptually a Unicode string": bytes a
    // request carried that are not UTF-8 would not decode on the client.
    out.emplace_back("grpc-message", percent_encode_grpc_message(to_valid_utf8(status.error().message)));
  return out;
}

std::string grpc_web_trailers_block(const HttpHeaders& trailers) {
  std::string out;
  for (const auto& [k, v] : trailers) out += k + ": " + v + "\r\n";
  return out;
}

Result<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value) {
  const Error bad{Code::invalid_argument, "grpc-timeout must be 1 to 8 digits and a unit (H M S m u n)"};
  if (value.size() < 2 || value.size() > 9) return bad;
  uint64_t n = 0;
  std::string_view digits = value.substr(0, value.size() - 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return bad;
  uint64_t unit_ns = 0;
  switch (value.back()) {
    case 'H': unit_ns = 3600'000'000'000ULL; break;
    case 'M': unit_ns = 60'000'000'000ULL; break;
    case 'S': unit_ns = 1'000'000'000ULL; break;
    case 'm': unit_ns = 1'000'000ULL; break;
    case 'u': unit_ns = 1'000ULL; break;
    case 'n': unit_ns = 1; break;
    default: return bad;
  }
  // 99999999H does not fit in nanoseconds: it means "no deadline worth keeping".
  const auto max = static_cast<uint64_t>(std::chrono::nanoseconds::max().count());
  if (n > max / unit_ns) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(static_cast<int64_t>(n * unit_ns));
}

}  // namespace kib::api
