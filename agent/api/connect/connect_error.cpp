#include "agent/api/connect/connect_error.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

namespace kib::api {

HttpResponse connect_error_response(const Error& error, int http_status) {
  // Built as a google.protobuf.Struct so protobuf's JSON printer does the escaping.
  google::protobuf::Struct body;
  auto& fields = *body.mutable_fields();
  fields["code"].set_string_value(std::string(code_name(error.code)));
  if (!error.message.empty()) fields["message"].set_string_value(error.message);
  HttpResponse r;
  r.status = http_status;
  r.headers.emplace_back("content-type", "application/json");
  if (!google::protobuf::util::MessageToJsonString(body, &r.body).ok())
    r.body = R"({"code":"internal"})";
  return r;
}

HttpResponse connect_error_response(const Error& error) {
  return connect_error_response(error, code_http_status(error.code));
}

}  // namespace kib::api
