#pragma once
// Label and annotation rules (API.md, Kubernetes syntax), shared by every resource
// and by list selectors. Violations are invalid_argument naming the field and entry.
#include <google/protobuf/map.h>

#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

using StringMap = google::protobuf::Map<std::string, std::string>;

inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxAnnotationBytes = 256 * 1024;  // keys and values together

// key = [DNS-subdomain prefix (<= 253) "/"] name (<= 63, [A-Za-z0-9] with -_. inside).
bool is_label_key(std::string_view key);
// <= 63 of the name alphabet, or empty.
bool is_label_value(std::string_view value);
bool is_utf8(std::string_view s);

// field names the map in messages, e.g. "labels" or "label_selector".
Status validate_labels(const StringMap& labels, std::string_view field = "labels");
Status validate_annotations(const StringMap& annotations, std::string_view field = "annotations");

// Whether labels carries every selector entry with exactly that value.
bool selector_matches(const StringMap& selector, const StringMap& labels);

}  // namespace kib::api
