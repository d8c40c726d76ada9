#include <doctest/doctest.h>

#include "agent/ctl/help_text.h"

using namespace kib::ctl;

TEST_CASE("completion offers groups, then verbs, then flags") {
  CHECK(completion_candidates({""}) == "agent\negress\nworkspace\n");
  CHECK(completion_candidates({"egress", "l"}) == "label\nlist\n");
  const std::string flags = completion_candidates({"egress", "create", "--u"});
  CHECK(flags == "--udp-enabled\n--username\n");
}

TEST_CASE("completion asks for file names after file flags") {
  CHECK(completion_candidates({"egress", "create", "--password-file", ""}) == "__files__\n");
  CHECK(completion_candidates({"workspace", "create", "--policy", "p"}) == "__files__\n");
  CHECK(completion_candidates({"-o", ""}) == "json\ntable\nyaml\n");
}

TEST_CASE("help lists every command of the table") {
  Invocation inv;
  const std::string h = help_text(inv);
  CHECK(h.find("workspace update-policy WORKSPACE_ID") != std::string::npos);
  CHECK(h.find("egress annotate EGRESS_ID") != std::string::npos);
}
