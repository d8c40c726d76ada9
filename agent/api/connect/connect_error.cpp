#include "agent/api/connect/connect_error.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "agent/common/utf8.h"

namespace kib::api {
namespace {

// A JSON string literal, escaped by protobuf's JSON printer (a Value holding a string).
std::string json_string(const std::string& s) {
  google::protobuf::Value v;
  v.set_string_value(s);
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(v, &out).ok()) return "\"\"";
  return out;
}

}  // namespace

HttpResponse connect_error_response(const Error& error, int http_status) {
  HttpResponse r;
  r.status = http_status;
  r.headers.emplace_back("content-type", "application/json");
  // Field order fixed ("code" first) so the body reads the same every time.
  r.body = "{\"code\":" + json_string(std::string(code_name(error.code)));
  // Messages may quote request bytes; the body must stay JSON (UTF-8) whatever they were.
  if (!error.message.empty()) r.body += ",\"message\":" + json_string(to_valid_utf8(error.message));
  r.body += "}";
  return r;
}

HttpResponse connect_error_response(const Error& error) {
  return connect_error_response(error, code_http_status(error.code));
}

}  // namespace kib::api
