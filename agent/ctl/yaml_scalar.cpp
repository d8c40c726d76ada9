#include "agent/ctl/yaml_scalar.h"

namespace kib::ctl {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_octal(char c) { return c >= '0' && c <= '7'; }

// A left-to-right cursor: each take_* consumes what it matches and says whether it did.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  bool done() const { return i == s.size(); }
  bool peek(char c) const { return i < s.size() && s[i] == c; }
  bool take(char c) {
    if (!peek(c)) return false;
    ++i;
    return true;
  }
  bool take_sign() { return take('-') || take('+'); }
  // One or more characters of a class; false (nothing consumed) when none.
  template <typename Pred>
  bool take_run(Pred pred) {
    const size_t start = i;
    while (i < s.size() && pred(s[i])) ++i;
    return i > start;
  }
  // [eE][-+]?[0-9]+ when present; false only for a malformed exponent.
  bool take_optional_exponent() {
    if (!take('e') && !take('E')) return true;
    take_sign();
    return take_run(is_digit);
  }
};

bool is_digit_or_underscore(char c) { return is_digit(c) || c == '_'; }

// [-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?
bool is_yaml_decimal(std::string_view s) {
  Cursor c{s};
  c.take_sign();
  if (c.take('.')) {
    if (!c.take_run(is_digit)) return false;
  } else {
    if (c.done() || !is_digit(s[c.i])) return false;
    c.take_run(is_digit_or_underscore);
    if (c.take('.')) c.take_run(is_digit_or_underscore);
  }
  return c.take_optional_exponent() && c.done();
}

// 0x[0-9a-fA-F_]+ and 0o?[0-7_]+
bool is_yaml_hex_or_octal(std::string_view s) {
  Cursor c{s};
  if (!c.take('0')) return false;
  if (c.take('x')) return c.take_run([](char ch) { return is_hex(ch) || ch == '_'; }) && c.done();
  c.take('o');
  return c.take_run([](char ch) { return is_octal(ch) || ch == '_'; }) && c.done();
}

// [0-9][0-9_]*(:[0-5]?[0-9])+
bool is_yaml_sexagesimal(std::string_view s) {
  Cursor c{s};
  if (c.done() || !is_digit(s[0])) return false;
  c.take_run(is_digit_or_underscore);
  bool any = false;
  while (c.take(':')) {
    // [0-5]?[0-9]: one digit, or two digits whose first is 0-5.
    const size_t start = c.i;
    if (!c.take_run(is_digit)) return false;
    const size_t n = c.i - start;
    if (n > 2 || (n == 2 && s[start] > '5')) return false;
    any = true;
  }
  return any && c.done();
}

// [-+]?\.(inf|Inf|INF) and \.(nan|NaN|NAN)
bool is_yaml_inf_or_nan(std::string_view s) {
  for (std::string_view w : {".nan", ".NaN", ".NAN"})
    if (s == w) return true;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return s == ".inf" || s == ".Inf" || s == ".INF";
}

bool is_yaml_word(std::string_view s) {
  static constexpr std::string_view kWords[] = {"",      "~",     "null",  "Null", "NULL", "y",  "Y",    "yes",  "Yes",
                                                "YES",   "n",     "N",     "no",   "No",   "NO", "true", "True", "TRUE",
                                                "false", "False", "FALSE", "on",   "On",   "ON", "off",  "Off",  "OFF"};
  for (std::string_view w : kWords)
    if (s == w) return true;
  return false;
}

}  // namespace

bool is_json_number(std::string_view s) {
  Cursor c{s};
  c.take('-');
  if (!c.take('0') && !c.take_run(is_digit)) return false;
  if (c.take('.') && !c.take_run(is_digit)) return false;
  return c.take_optional_exponent() && c.done();
}

bool reads_as_non_string(std::string_view s) {
  return is_yaml_word(s) || is_yaml_decimal(s) || is_yaml_hex_or_octal(s) || is_yaml_inf_or_nan(s) ||
         is_yaml_sexagesimal(s);
}

}  // namespace kib::ctl
