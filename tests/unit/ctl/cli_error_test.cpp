#include <doctest/doctest.h>

#include <sstream>

#include "agent/ctl/cli_error.h"
#include "agent/ctl/connect_client.h"
#include "agent/ctl/ctl_main.h"

using namespace kib::ctl;
using kib::Code;

TEST_CASE("errors print as 'error: <code>: <message>'") {
  CHECK(error_line({Code::not_found, "egress eg-1 not found"}) == "error: not_found: egress eg-1 not found\n");
}

TEST_CASE("each Connect code has its own exit status, 10 + the code number") {
  CHECK(exit_code_for({Code::invalid_argument, ""}) == 13);
  CHECK(exit_code_for({Code::not_found, ""}) == 15);
  CHECK(exit_code_for({Code::failed_precondition, ""}) == 19);
  CHECK(exit_code_for({Code::aborted, ""}) == 20);
  CHECK(exit_code_for({Code::unavailable, ""}) == 24);
  CHECK(exit_code_for({Code::unauthenticated, ""}) == 26);
}

TEST_CASE("a Connect error body gives its code and message") {
  auto e = error_from_response(409, R"({"code":"aborted","message":"revision is 4, not 3"})");
  CHECK(e.code == Code::aborted);
  CHECK(e.message == "revision is 4, not 3");
}

TEST_CASE("without a Connect error body the HTTP status decides, per Connect's table") {
  CHECK(error_from_response(404, "not json").code == Code::unimplemented);
  CHECK(error_from_response(503, "").code == Code::unavailable);
  CHECK(error_from_response(401, "").code == Code::unauthenticated);
  CHECK(error_from_response(400, "{}").code == Code::internal);
  CHECK(error_from_response(500, R"({"code":"no_such_code"})").code == Code::unknown);
}

TEST_CASE("usage errors exit 2 with the error line on stderr") {
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "get"}, out, err, nullptr) == kExitUsage);
  CHECK(err.str() == "error: invalid_argument: missing EGRESS_ID\n");
  CHECK(out.str().empty());
}

TEST_CASE("an unreachable agent is 'unavailable' naming the socket") {
  std::ostringstream out, err;
  CHECK(run_ctl({"agent", "--socket", "/nonexistent/kibotos-test.sock"}, out, err, nullptr) == 24);
  CHECK(err.str().rfind("error: unavailable: cannot reach the agent at /nonexistent/kibotos-test.sock", 0) == 0);
}

TEST_CASE("--version prints 'kibotosctl <version>'") {
  std::ostringstream out, err;
  CHECK(run_ctl({"--version"}, out, err, nullptr) == 0);
  CHECK(out.str() == std::string("kibotosctl ") + KIBOTOS_VERSION + "\n");
}
