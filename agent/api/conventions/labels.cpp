#include "agent/api/conventions/labels.h"

#include "agent/api/conventions/quoted.h"

namespace kib::api {
namespace {

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Kubernetes' qualified-name part: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], <= 63.
bool is_name(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!is_alnum(s.front()) || !is_alnum(s.back())) return false;
  for (char c : s)
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

// RFC 1123 subdomain as Kubernetes checks it: lowercase labels joined by dots, <= 253.
bool is_dns_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (!is_lower_alnum(label.front()) || !is_lower_alnum(label.back())) return false;
    for (char c : label)
      if (!is_lower_alnum(c) && c != '-') return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

Error invalid(std::string_view field, std::string what) {
  return Error{Code::invalid_argument, std::string(field) + ": " + std::move(what)};
}

}  // namespace

bool is_label_key(std::string_view key) {
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) return is_name(key);
  return is_dns_subdomain(key.substr(0, slash)) && is_name(key.substr(slash + 1));
}

bool is_label_value(std::string_view value) { return value.empty() || is_name(value); }

bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else
      return false;
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values beyond Unicode are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

Status validate_labels(const StringMap& labels, std::string_view field) {
  if (labels.size() > kMaxLabels)
    return invalid(field, "at most " + std::to_string(kMaxLabels) + " labels, got " + std::to_string(labels.size()));
  for (const auto& [k, v] : labels) {
    if (!is_label_key(k)) return invalid(field, "key " + quoted(k) + " is not a valid label key");
    if (!is_label_value(v))
      return invalid(field, "value " + quoted(v) + " of key " + quoted(k) + " is not a valid label value");
  }
  return {};
}

Status validate_annotations(const StringMap& annotations, std::string_view field) {
  size_t total = 0;
  for (const auto& [k, v] : annotations) {
    if (!is_label_key(k)) return invalid(field, "key " + quoted(k) + " is not a valid annotation key");
    if (!is_utf8(v)) return invalid(field, "value of key " + quoted(k) + " is not UTF-8");
    total += k.size() + v.size();
  }
  if (total > kMaxAnnotationBytes)
    return invalid(field, "keys and values together are " + std::to_string(total) + " bytes, at most " +
                              std::to_string(kMaxAnnotationBytes));
  return {};
}

bool selector_matches(const StringMap& selector, const StringMap& labels) {
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace kib::api
