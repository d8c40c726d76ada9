// agent/api/conventions: label syntax, page tokens, command IDs, fingerprints.
#include <doctest/doctest.h>

#include "agent/api/conventions/command_id.h"
#include "agent/api/conventions/labels.h"
#include "agent/api/conventions/page_token.h"
#include "kibotos/ctrl/v1/egress.pb.h"

using namespace kib;
using namespace kib::api;

TEST_CASE("Labels: a key is an optional DNS-subdomain prefix and a name of at most 63 characters") {
  for (std::string ok : std::vector<std::string>{"a", "A", "app", "app.kubernetes.io/name", "a-b_c.d", "x/y",
                                                 "example.com/Team_1", std::string(63, 'k'),
                                                 std::string(63, 'p') + "." + std::string(63, 'p') + "." +
                                                     std::string(63, 'p') + "." + std::string(61, 'p') + "/n",
                                                 "a1.b2/c", "1"}) {
    CAPTURE(ok);
    CHECK(is_label_key(ok));
  }
  for (std::string bad : std::vector<std::string>{"",
                                                  "-a",
                                                  "a-",
                                                  "_a",
                                                  "a_",
                                                  ".a",
                                                  "a.",
                                                  "a b",
                                                  "a/b/c",
                                                  "/a",
                                                  "a/",
                                                  "Example.com/a",
                                                  "ex_ample.com/a",
                                                  "-ex.com/a",
                                                  "ex..com/a",
                                                  std::string(64, 'k'),
                                                  std::string(63, 'p') + "." + std::string(63, 'p') + "." +
                                                      std::string(63, 'p') + "." + std::string(62, 'p') + "/n",
                                                  std::string(64, 'p') + ".com/n",
                                                  "caf\xc3\xa9",
                                                  "a:b"}) {
    CAPTURE(bad);
    CHECK_FALSE(is_label_key(bad));
  }
}

TEST_CASE("Labels: a value is empty or at most 63 of the name alphabet, alphanumeric at both ends") {
  CHECK(is_label_value(""));
  CHECK(is_label_value("v"));
  CHECK(is_label_value("v1.2-3_x"));
  CHECK(is_label_value(std::string(63, 'v')));
  CHECK_FALSE(is_label_value(std::string(64, 'v')));
  CHECK_FALSE(is_label_value("-v"));
  CHECK_FALSE(is_label_value("v."));
  CHECK_FALSE(is_label_value("a/b"));
  CHECK_FALSE(is_label_value("a b"));
}

TEST_CASE("Labels: at most 64 labels") {
  StringMap m;
  // 'k' (char), not "k": `"k" + std::string` trips GCC 12's -Wrestrict false positive
  // at -O3 (GCC PR 105329, 105651).
  for (int i = 0; i < 64; ++i) m['k' + std::to_string(i)] = "";
  CHECK(validate_labels(m).ok());
  m["one-more"] = "";
  CHECK(validate_labels(m).error().code == Code::invalid_argument);
}

TEST_CASE("Annotations: keys as labels, values any UTF-8, 256 KiB for keys and values together") {
  StringMap m;
  m["example.com/x"] = "\xe2\x82\xac \xf0\x9f\x98\x80 text";
  CHECK(validate_annotations(m).ok());
  m["bad key"] = "";
  CHECK_FALSE(validate_annotations(m).ok());
  m.clear();
  for (std::string bad : std::vector<std::string>{"\xff", "\xc3", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    m["k"] = bad;
    CHECK_FALSE(validate_annotations(m).ok());
  }
  m.clear();
  m["k"] = std::string(256 * 1024 - 1, 'x');
  CHECK(validate_annotations(m).ok());
  m["k"] += "x";
  CHECK_FALSE(validate_annotations(m).ok());
}

TEST_CASE("Page tokens: round trip, bound to kind and selector, tamper-evident") {
  std::string secret(32, 's');
  StringMap sel;
  sel["team"] = "a";
  std::string t = make_page_token(secret, "egress", 42, sel);
  CHECK(*parse_page_token(secret, "egress", t, sel) == 42);
  CHECK(*parse_page_token(secret, "egress", "", sel) == 0);
  CHECK_FALSE(parse_page_token(secret, "workspace", t, sel).ok());
  CHECK_FALSE(parse_page_token(std::string(32, 'z'), "egress", t, sel).ok());
  StringMap other = sel;
  other["tier"] = "x";
  CHECK_FALSE(parse_page_token(secret, "egress", t, other).ok());
  // The selector {"a": "b=c"} and {"a=b": "c"} are different selectors.
  StringMap s1, s2;
  s1["a"] = "b=c";
  s2["a=b"] = "c";
  CHECK_FALSE(parse_page_token(secret, "egress", make_page_token(secret, "egress", 1, s1), s2).ok());
  // Changing the position is caught by the MAC.
  std::string moved = make_page_token(secret, "egress", 43, sel).substr(0, 16) + t.substr(16);
  CHECK_FALSE(parse_page_token(secret, "egress", moved, sel).ok());
}

TEST_CASE("Page sizes: 0 selects 100, at most 1000") {
  CHECK(*effective_page_size(0) == 100);
  CHECK(*effective_page_size(1) == 1);
  CHECK(*effective_page_size(1000) == 1000);
  CHECK(effective_page_size(1001).error().code == Code::invalid_argument);
}

TEST_CASE("Fingerprints ignore command_id and include the method") {
  ::kibotos::ctrl::v1::DeleteEgressRequest a, b;
  a.set_command_id("one");
  a.set_egress_id("eg-1");
  b.set_command_id("two");
  b.set_egress_id("eg-1");
  CHECK(request_fingerprint("M", a) == request_fingerprint("M", b));
  CHECK(request_fingerprint("M", a) != request_fingerprint("N", a));
  b.set_egress_id("eg-2");
  CHECK(request_fingerprint("M", a) != request_fingerprint("M", b));
  CHECK(request_fingerprint("M", a).size() == 32);
}
