#include <doctest/doctest.h>

#include "agent/common/status_code.h"

using kib::Code;

TEST_CASE("Connect codes map to the HTTP statuses of the Connect protocol") {
  CHECK(kib::code_http_status(Code::invalid_argument) == 400);
  CHECK(kib::code_http_status(Code::failed_precondition) == 400);
  CHECK(kib::code_http_status(Code::out_of_range) == 400);
  CHECK(kib::code_http_status(Code::unauthenticated) == 401);
  CHECK(kib::code_http_status(Code::permission_denied) == 403);
  CHECK(kib::code_http_status(Code::not_found) == 404);
  CHECK(kib::code_http_status(Code::aborted) == 409);
  CHECK(kib::code_http_status(Code::already_exists) == 409);
  CHECK(kib::code_http_status(Code::resource_exhausted) == 429);
  CHECK(kib::code_http_status(Code::canceled) == 499);
  CHECK(kib::code_http_status(Code::unknown) == 500);
  CHECK(kib::code_http_status(Code::internal) == 500);
  CHECK(kib::code_http_status(Code::data_loss) == 500);
  CHECK(kib::code_http_status(Code::unimplemented) == 501);
  CHECK(kib::code_http_status(Code::unavailable) == 503);
  CHECK(kib::code_http_status(Code::deadline_exceeded) == 504);
}

TEST_CASE("Connect code names round-trip") {
  for (int i = 0; i <= 16; ++i) {
    auto c = static_cast<Code>(i);
    auto back = kib::code_from_name(kib::code_name(c));
    REQUIRE(back.has_value());
    CHECK(*back == c);
  }
  CHECK_FALSE(kib::code_from_name("no_such_code").has_value());
}
