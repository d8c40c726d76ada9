#include "agent/common/utf8.h"

#include <doctest/doctest.h>

#include <string>

using kib::to_valid_utf8;
using kib::valid_utf8_prefix;

TEST_CASE("well-formed UTF-8 is kept as it is") {
  const std::string s = "ascii \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";  // é € 😀
  CHECK(valid_utf8_prefix(s) == s.size());
  CHECK(to_valid_utf8(s) == s);
  CHECK(to_valid_utf8("") == "");
}

TEST_CASE("an overlong form (C0 AD) is replaced byte by byte with U+FFFD") {
  CHECK(valid_utf8_prefix("ab\xC0\xAD") == 2);
  CHECK(to_valid_utf8("ab\xC0\xAD"
                      "cd") ==
        "ab\xEF\xBF\xBD\xEF\xBF\xBD"
        "cd");
  CHECK(to_valid_utf8("\xE0\x80\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("surrogates, code points above U+10FFFF and truncated sequences are not UTF-8") {
  CHECK(valid_utf8_prefix("\xED\xA0\x80") == 0);
  CHECK(valid_utf8_prefix("\xF4\x90\x80\x80") == 0);
  CHECK(valid_utf8_prefix("\xF5\x80\x80\x80") == 0);
  CHECK(valid_utf8_prefix("x\xE2\x82") == 1);
  CHECK(valid_utf8_prefix("\xFF") == 0);
  CHECK(to_valid_utf8("\xE2\x82") == "\xEF\xBF\xBD\xEF\xBF\xBD");
}
