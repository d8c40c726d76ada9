#include "agent/api/connect/json_keys.h"

#include <google/protobuf/descriptor.pb.h>

#include <cstdint>
#include <map>

#include "agent/common/utf8.h"

namespace kib::api {
namespace {

namespace pb = google::protobuf;

// protobuf's parser stops at 100 levels; this bound only keeps the recursion finite.
constexpr int kMaxDepth = 128;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_key_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$'; }
bool is_key_char(char c) { return is_key_start(c) || (c >= '0' && c <= '9'); }
bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || c == 'x';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A message whose JSON form is its fields (not a well-known type with a JSON form of
// its own, such as Struct, Any or Timestamp, whose keys are compared as written).
bool has_field_keys(const pb::Descriptor* type) {
  return type != nullptr && !type->options().map_entry() && type->file()->package() != "google.protobuf";
}

const pb::FieldDescriptor* field_for_key(const pb::Descriptor& type, const std::string& key) {
  for (int i = 0; i < type.field_count(); ++i) {
    const pb::FieldDescriptor* f = type.field(i);
    if (f->name() == key || f->json_name() == key) return f;
  }
  return nullptr;
}

// The message type of the values under a key: a field's message (or map entry) type,
// a map's value message type, or none (scalars, and keys of Struct-like objects).
const pb::Descriptor* value_type(const pb::FieldDescriptor* f) { return f == nullptr ? nullptr : f->message_type(); }

class KeyScanner {
 public:
  explicit KeyScanner(std::string_view json) : s_(json) {}

  // The whole document: one value, then only whitespace.
  Status document(const pb::Descriptor* type) {
    KIB_TRY(value(type, 0));
    skip_space();
    if (i_ != s_.size()) return malformed();
    return {};
  }
  bool is_malformed() const { return malformed_; }
  size_t offset() const { return i_; }

 private:
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void skip_space() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  Error malformed() {
    malformed_ = true;
    return Error{Code::invalid_argument, "malformed JSON at " + text_position(s_, i_)};
  }

  Status value(const pb::Descriptor* type, int depth) {
    skip_space();
    if (depth > kMaxDepth) return malformed();
    if (at('{')) return object(type, depth + 1);
    if (at('[')) return array(type, depth + 1);
    if (at('"') || at('\'')) {
      KIB_TRY(string());
      return {};
    }
    return scalar();
  }

  Status scalar() {
    const std::string_view rest = s_.substr(i_);
    for (std::string_view word : {"true", "false", "null"}) {
      if (rest.starts_with(word)) {
        i_ += word.size();
        return {};
      }
    }
    if (!at('-') && !(i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9')) return malformed();
    while (i_ < s_.size() && is_number_char(s_[i_])) ++i_;
    return {};
  }

  Status array(const pb::Descriptor* type, int depth) {
    ++i_;  // '['
    for (;;) {
      skip_space();
      if (at(']')) break;  // empty, or after a trailing comma (protobuf allows it)
      KIB_TRY(value(type, depth));
      skip_space();
      if (at(']')) break;
      if (!at(',')) return malformed();
      ++i_;
    }
    ++i_;
    return {};
  }

  // Keys are compared by what they name: a field (its number; JSON and proto names
  // alike) in a message, the key as written in a map or a Struct.
  Status object(const pb::Descriptor* type, int depth) {
    ++i_;                                     // '{'
    std::map<std::string, std::string> seen;  // identity -> the key as first given
    for (;;) {
      skip_space();
      if (at('}')) break;  // empty, or after a trailing comma (protobuf allows it)
      KIB_TRY_ASSIGN(std::string key, object_key());
      const pb::FieldDescriptor* f = has_field_keys(type) ? field_for_key(*type, key) : nullptr;
      // A field's number, as text after '#': std::to_string appended, not "#" + a
      // temporary (GCC 12 -O3 takes that for an overlapping memcpy, PR 105329).
      std::string identity = key;
      if (f != nullptr) identity.assign(1, '#').append(std::to_string(f->number()));
      if (auto [it, fresh] = seen.emplace(identity, key); !fresh) return duplicate(type, f, it->second, key);
      skip_space();
      if (!at(':')) return malformed();
      ++i_;
      const pb::Descriptor* inner = nullptr;
      if (type != nullptr && type->options().map_entry())
        inner = value_type(type->map_value());
      else if (has_field_keys(type))
        inner = value_type(f);
      KIB_TRY(value(inner, depth));
      skip_space();
      if (at('}')) break;
      if (!at(',')) return malformed();
      ++i_;
    }
    ++i_;
    return {};
  }

  static Error duplicate(const pb::Descriptor* type, const pb::FieldDescriptor* f, const std::string& first,
                         const std::string& again) {
    if (f == nullptr) {
      const std::string where = type != nullptr ? " in " + type->full_name() : "";
      return Error{Code::invalid_argument, "key \"" + again + "\" is given twice" + where};
    }
    std::string message = "field " + f->full_name() + " is given twice";
    if (first != again) message += " (as \"" + first + "\" and \"" + again + "\")";
    return Error{Code::invalid_argument, message};
  }

  Result<std::string> object_key() {
    if (at('"') || at('\'')) return string();
    if (i_ >= s_.size() || !is_key_start(s_[i_])) return malformed();
    const size_t start = i_;
    while (i_ < s_.size() && is_key_char(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  // A quoted string, unescaped as protobuf's parser does ("\x" is "x" for another x).
  Result<std::string> string() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] != '\\') {
        out.push_back(s_[i_++]);
        continue;
      }
      if (i_ + 1 >= s_.size()) break;
      if (s_[i_ + 1] == 'u') {
        KIB_TRY(unicode_escape(out));
        continue;
      }
      static constexpr std::string_view kFrom = "bfnrtv", kTo = "\b\f\n\r\t\v";
      const size_t k = kFrom.find(s_[i_ + 1]);
      out.push_back(k == std::string_view::npos ? s_[i_ + 1] : kTo[k]);
      i_ += 2;
    }
    if (!at(quote)) return malformed();
    ++i_;
    return out;
  }

  std::optional<uint32_t> hex4(size_t at) const {
    if (at + 6 > s_.size() || s_[at] != '\\' || s_[at + 1] != 'u') return std::nullopt;
    uint32_t v = 0;
    for (size_t k = at + 2; k < at + 6; ++k) {
      const int h = hex_value(s_[k]);
      if (h < 0) return std::nullopt;
      v = v << 4 | static_cast<uint32_t>(h);
    }
    return v;
  }

  // \uXXXX, a surrogate pair being two of them.
  Status unicode_escape(std::string& out) {
    auto cp = hex4(i_);
    if (!cp || (*cp >= 0xDC00 && *cp <= 0xDFFF)) return malformed();
    i_ += 6;
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
      auto low = hex4(i_);
      if (!low || *low < 0xDC00 || *low > 0xDFFF) return malformed();
      cp = 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00);
      i_ += 6;
    }
    append_utf8(out, *cp);
    return {};
  }

  std::string_view s_;
  size_t i_ = 0;
  bool malformed_ = false;
};

}  // namespace

Status check_unique_json_keys(std::string_view json, const pb::Descriptor& type) {
  return KeyScanner(json).document(&type);
}

std::optional<size_t> json_syntax_error_offset(std::string_view json) {
  // protobuf reads only UTF-8 ("Encountered non UTF-8 code points").
  const size_t valid = valid_utf8_prefix(json);
  if (valid != json.size()) return valid;
  KeyScanner scanner(json);
  if (scanner.document(nullptr).ok() || !scanner.is_malformed()) return std::nullopt;
  return scanner.offset();
}

std::string text_position(std::string_view text, size_t offset) {
  const std::string_view before = text.substr(0, offset);
  size_t line = 1;
  for (char c : before) line += c == '\n';
  const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

}  // namespace kib::api
