#include <doctest/doctest.h>

#include "agent/ctl/suggest.h"

using namespace kib::ctl;

TEST_CASE("one edit away is close: a letter missing, extra, wrong, or two swapped") {
  const std::vector<std::string> names = {"egress", "workspace", "agent"};
  CHECK(closest_names("egres", names) == std::vector<std::string>{"egress"});
  CHECK(closest_names("egresss", names) == std::vector<std::string>{"egress"});
  CHECK(closest_names("egrass", names) == std::vector<std::string>{"egress"});
}

TEST_CASE("short words allow one edit, longer ones two; far words get no suggestion") {
  CHECK(closest_names("lsit", {"list"}) == std::vector<std::string>{"list"});
  CHECK(closest_names("lt", {"list"}).empty());
  CHECK(closest_names("adres", {"address"}) == std::vector<std::string>{"address"});
  CHECK(closest_names("frobnicate", {"egress", "workspace", "agent"}).empty());
  CHECK(closest_names("x", {"ca"}).empty());
}

TEST_CASE("the nearest wins; ties are all named") {
  CHECK(closest_names("lable", {"label", "list"}) == std::vector<std::string>{"label"});
  CHECK(did_you_mean("bsh", {"bash", "zsh", "fish"}) == "; did you mean 'bash' or 'zsh'?");
  CHECK(did_you_mean("adress", {"address"}, "--", "") == "; did you mean --address?");
  CHECK(did_you_mean("zzz", {"address"}).empty());
}

TEST_CASE("an exact name is no typo of itself") { CHECK(closest_names("egress", {"egress"}).empty()); }
