#pragma once
// The gRPC side of a call's status: grpc-status / grpc-message fields, the gRPC-Web
// trailers block, grpc-timeout, and the code tables of the Connect spec. Pure, no I/O.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "agent/api/http/http_message.h"
#include "agent/common/result.h"

namespace kib::api {

// Connect's codes are gRPC's: canceled = 1 … unauthenticated = 16 (the Connect spec's
// "Error Codes" table), so the number on the wire is the enum's value.
int grpc_status_number(Code code);
std::optional<Code> code_from_grpc_status(std::string_view number);

// The code a client gives a response with no status of its own, from its HTTP status
// (the Connect spec's "HTTP to Error Code" table, the same as gRPC's).
Code code_for_http_status(int http_status);

// grpc-message is percent-encoded: every byte outside 0x20..0x7E, and '%' itself.
std::string percent_encode_grpc_message(std::string_view message);

// grpc-status and, for an error with a message, grpc-message.
HttpHeaders grpc_status_fields(const Status& status);

// gRPC-Web's trailers: "name: value\r\n" lines in an envelope flagged 0x80.
std::string grpc_web_trailers_block(const HttpHeaders& trailers);

// "grpc-timeout → TimeoutValue TimeoutUnit": at most 8 ASCII digits, then one of
// H M S m u n. Anything else is invalid_argument.
Result<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value);

}  // namespace kib::api
