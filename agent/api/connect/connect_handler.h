#pragma once
// The Connect unary protocol over one HTTP request: checks the method, headers and
// body, decodes the request with its codec, calls the registered handler and encodes
// its answer (connectrpc.com/docs/protocol, "Unary-Request" / "Unary-Response").
#include <chrono>
#include <cstddef>
#include <string>

#include "agent/api/connect/message_codec.h"
#include "agent/api/connect/method_registry.h"
#include "agent/api/http/http_message.h"

namespace kib::api {

// connect-timeout-ms ("Timeout-Milliseconds → {positive integer as ASCII string of at
// most 10 digits}", unary and streaming alike) as a deadline; none when absent.
Result<std::chrono::steady_clock::time_point> connect_deadline(const std::string* header,
                                                               std::chrono::steady_clock::time_point now);

// A 415 for a method of that kind, with the Accept-Post connect-go's handlers for it
// send: the Connect content types differ by kind (application/json|proto for a unary
// method, application/connect+json|proto for a stream); gRPC and gRPC-Web take both.
HttpResponse unsupported_media_type(bool streaming);

class ConnectHandler final : public HttpHandler {
 public:
  // registry must outlive the handler; it is read-only once serving starts.
  ConnectHandler(const MethodRegistry& registry, size_t max_body_bytes)
      : registry_(registry), max_body_bytes_(max_body_bytes) {}

  // Never throws: handler exceptions become `internal`.
  HttpResponse handle(const HttpRequest& request) const override;

  size_t max_body_bytes() const override { return max_body_bytes_; }
  // Refusals decided by the headers, and a body that reached its Content-Length.
  bool answerable(const HttpRequest& so_far) const override;

 private:
  HttpResponse dispatch(const HttpRequest& request) const;
  HttpResponse call(const Method& method, const HttpRequest& request, Codec codec, const CallContext& ctx) const;

  const MethodRegistry& registry_;
  size_t max_body_bytes_;
};

}  // namespace kib::api
