// Fuzz target: the API conventions that read client text (agent/api/conventions/):
// page tokens, label maps and selectors, command IDs. The input gives a resource
// kind, a selector (up to 8 entries) and a token. Checked beyond not crashing: a token
// is accepted only as the agent would have issued it (same kind, same selector); any
// sequence number round-trips through a token and is refused under another kind or
// selector; a selector that validates matches itself; command IDs are 1 to 128
// printable ASCII characters, exactly.
#include <string>

#include "agent/api/conventions/command_id.h"
#include "agent/api/conventions/labels.h"
#include "agent/api/conventions/page_token.h"
#include "tests/fuzz/fuzz_input.h"

// GCC 12 at -O3 reports string assignments inlined here as overlapping memcpy
// (GCC bug 105329, a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace {

using kib::fuzz::require;
using kib::fuzz::text;
namespace api = kib::api;

constexpr std::string_view kSecret = "0123456789abcdef0123456789abcdef";

void check_command_id(std::string_view id) {
  bool printable = !id.empty() && id.size() <= 128;
  for (char c : id) printable = printable && c >= 0x20 && c <= 0x7e;
  require(api::validate_command_id(id).ok() == printable, "command IDs: 1 to 128 printable ASCII");
}

void check_token(std::string_view kind, const api::StringMap& selector, std::string_view token, uint64_t seq) {
  auto parsed = api::parse_page_token(kSecret, kind, token, selector);
  if (parsed.ok() && !token.empty())
    require(api::make_page_token(kSecret, kind, *parsed, selector) == token, "only issued tokens are accepted");
  if (token.empty()) require(parsed.ok() && *parsed == 0, "an empty token is the first page");

  const std::string issued = api::make_page_token(kSecret, kind, seq, selector);
  auto back = api::parse_page_token(kSecret, kind, issued, selector);
  require(back.ok() && *back == seq, "an issued token gives its sequence number back");
  require(!api::parse_page_token(kSecret, std::string(kind) + "x", issued, selector).ok(),
          "a token is refused for another kind");
  api::StringMap other = selector;
  other["fuzz-extra"] = "1";
  require(!api::parse_page_token(kSecret, kind, issued, other).ok(), "a token is refused for another selector");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kib::fuzz::FuzzInput in(data, size);
  static const char* kKinds[] = {"egress", "workspace"};
  const std::string_view kind = kKinds[in.byte() % 2];
  const uint64_t seq = (uint64_t{in.u16()} << 48) | (uint64_t{in.u16()} << 16) | in.u16();
  api::StringMap selector;
  for (int n = in.byte() % 9; n > 0; --n) {
    const std::string key(text(in.bytes(in.byte())));
    selector[key] = std::string(text(in.bytes(in.byte())));
  }
  if (api::validate_labels(selector, "label_selector").ok()) {
    require(api::selector_matches(selector, selector), "a selector matches the labels it names");
    for (const auto& [k, v] : selector) require(api::is_label_key(k) && api::is_label_value(v), "valid entries");
  }
  const std::string_view token = text(in.rest());
  check_command_id(token);
  check_token(kind, selector, token, seq);
  return 0;
}
