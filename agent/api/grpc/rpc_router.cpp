#include "agent/api/grpc/rpc_router.h"

#include "agent/api/compression/gzip.h"
#include "agent/api/connect/connect_handler.h"
#include "agent/api/grpc/grpc_status.h"

namespace kib::api {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<RpcContentType> envelope_type(const HttpRequest& req) {
  const std::string* content_type = req.header("content-type");
  auto type = classify_content_type(content_type ? *content_type : "");
  if (!type || type->protocol == RpcProtocol::connect_unary) return std::nullopt;
  return type;
}

// grpc-timeout (gRPC, gRPC-Web) or connect-timeout-ms (Connect streaming).
Result<Clock::time_point> deadline_of(const HttpRequest& req, RpcProtocol protocol, Clock::time_point now) {
  if (protocol == RpcProtocol::connect_stream) return connect_deadline(req.header("connect-timeout-ms"), now);
  const std::string* v = req.header("grpc-timeout");
  if (v == nullptr) return Clock::time_point::max();
  KIB_TRY_ASSIGN(auto timeout, parse_grpc_timeout(*v));
  if (timeout > Clock::time_point::max() - now) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

// The response to a whole request over HTTP/1.1: the call's head and body at once.
HttpResponse run_whole(EnvelopeCall& call, const std::string& body) {
  StreamOutput out;
  call.on_body(body, true, out);
  HttpResponse r;
  r.status = out.status;
  r.headers = std::move(out.headers);
  r.body = std::move(out.data);
  return r;
}

}  // namespace

// connect-go's Connect handler for a unary method takes only the unary content types:
// a Connect streaming request to it is 415, never served (gRPC and gRPC-Web have one
// content type for both kinds).
bool RpcRouter::connect_stream_to_unary(const HttpRequest& req, RpcContentType type) const {
  if (type.protocol != RpcProtocol::connect_stream) return false;
  std::string_view path = req.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  const Method* method = registry_.find(std::string(path));
  return method != nullptr && !method->streaming;
}

EnvelopeCallSetup RpcRouter::setup(const HttpRequest& req, RpcContentType type) const {
  EnvelopeCallSetup s;
  s.type = type;
  s.max_message_bytes = max_body_bytes();
  s.context.peer = req.peer;
  s.context.waker = req.waker;
  const bool connect = type.protocol == RpcProtocol::connect_stream;
  const std::string* encoding = req.header(connect ? "connect-content-encoding" : "grpc-encoding");
  s.request_gzip = encoding != nullptr && *encoding == kGzip;
  s.response_gzip =
      s.request_gzip || lists_gzip(req.header(connect ? "connect-accept-encoding" : "grpc-accept-encoding"));
  std::string_view path = req.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  if (req.method != "POST") {
    s.refusal = Error{Code::unimplemented, "only POST is supported"};
  } else if ((s.method = registry_.find(std::string(path))) == nullptr) {
    s.refusal = Error{Code::unimplemented, "unknown method /" + std::string(path)};
  } else if (encoding != nullptr && !s.request_gzip && *encoding != "identity") {
    s.refusal = Error{Code::unimplemented, "message encoding \"" + *encoding + "\" is not supported (gzip is)"};
  } else if (auto deadline = deadline_of(req, type.protocol, Clock::now()); !deadline.ok()) {
    s.refusal = deadline.error();
  } else {
    s.context.deadline = *deadline;
  }
  return s;
}

bool RpcRouter::answerable(const HttpRequest& so_far) const {
  auto type = envelope_type(so_far);
  if (!type) return connect_.answerable(so_far);
  // Reached over HTTP/2 only for what open() declined; over HTTP/1.1 (whole bodies)
  // for every request: gRPC is refused there whatever the headers say.
  return connect_stream_to_unary(so_far, *type) || type->protocol == RpcProtocol::grpc ||
         setup(so_far, *type).refusal.has_value();
}

std::unique_ptr<StreamingCall> RpcRouter::open(const HttpRequest& head) const {
  auto type = envelope_type(head);
  if (!type || connect_stream_to_unary(head, *type)) return nullptr;
  return std::make_unique<EnvelopeCall>(setup(head, *type));
}

HttpResponse RpcRouter::handle(const HttpRequest& req) const {
  auto type = envelope_type(req);
  if (!type) return connect_.handle(req);
  if (connect_stream_to_unary(req, *type)) return unsupported_media_type(false);
  EnvelopeCallSetup s = setup(req, *type);
  // gRPC's status travels in HTTP/2 trailers, which this HTTP/1.1 transport does not
  // send: only an answer without a message (Trailers-Only) can be given.
  if (type->protocol == RpcProtocol::grpc && !s.refusal)
    s.refusal = Error{Code::unimplemented, "gRPC needs HTTP/2 (gRPC-Web and Connect work over HTTP/1.1)"};
  if (req.body_too_large && !s.refusal)
    s.refusal =
        Error{Code::resource_exhausted, "request body larger than " + std::to_string(max_body_bytes()) + " bytes"};
  EnvelopeCall call(std::move(s));
  return run_whole(call, req.body);
}

}  // namespace kib::api
