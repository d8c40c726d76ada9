#pragma once
// The API's HTTP handler for every protocol on the same paths, as connect-go serves
// them: Connect unary goes to the ConnectHandler; gRPC, gRPC-Web and Connect streaming
// become EnvelopeCalls (fed as the body arrives over HTTP/2, whole over HTTP/1.1).
#include <memory>

#include "agent/api/connect/connect_handler.h"
#include "agent/api/grpc/envelope_call.h"

namespace kib::api {

class RpcRouter final : public HttpHandler {
 public:
  // Both must outlive the router.
  RpcRouter(const MethodRegistry& registry, const ConnectHandler& connect) : registry_(registry), connect_(connect) {}

  HttpResponse handle(const HttpRequest& request) const override;
  size_t max_body_bytes() const override { return connect_.max_body_bytes(); }
  bool answerable(const HttpRequest& so_far) const override;
  std::unique_ptr<StreamingCall> open(const HttpRequest& head) const override;

  // What an EnvelopeCall for this request needs: its method, or the refusal the
  // headers already decide (unknown method, bad timeout, unknown encoding).
  EnvelopeCallSetup setup(const HttpRequest& head, RpcContentType type) const;

 private:
  bool connect_stream_to_unary(const HttpRequest& req, RpcContentType type) const;

  const MethodRegistry& registry_;
  const ConnectHandler& connect_;
};

}  // namespace kib::api
