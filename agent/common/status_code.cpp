#include "agent/common/status_code.h"

#include <array>
#include <utility>

namespace kib {
namespace {

struct CodeRow {
  Code code;
  std::string_view name;
  int http;
};

constexpr std::array<CodeRow, 17> kCodes{{
    {Code::ok, "ok", 200},
    {Code::canceled, "canceled", 499},
    {Code::unknown, "unknown", 500},
    {Code::invalid_argument, "invalid_argument", 400},
    {Code::deadline_exceeded, "deadline_exceeded", 504},
    {Code::not_found, "not_found", 404},
    {Code::already_exists, "already_exists", 409},
    {Code::permission_denied, "permission_denied", 403},
    {Code::resource_exhausted, "resource_exhausted", 429},
    {Code::failed_precondition, "failed_precondition", 400},
    {Code::aborted, "aborted", 409},
    {Code::out_of_range, "out_of_range", 400},
    {Code::unimplemented, "unimplemented", 501},
    {Code::internal, "internal", 500},
    {Code::unavailable, "unavailable", 503},
    {Code::data_loss, "data_loss", 500},
    {Code::unauthenticated, "unauthenticated", 401},
}};

const CodeRow& row(Code c) { return kCodes[static_cast<size_t>(c)]; }

}  // namespace

std::string_view code_name(Code c) { return row(c).name; }

int code_http_status(Code c) { return row(c).http; }

std::optional<Code> code_from_name(std::string_view name) {
  for (const auto& r : kCodes)
    if (r.name == name) return r.code;
  return std::nullopt;
}

}  // namespace kib
