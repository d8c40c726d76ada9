#include "agent/api/connect/connect_handler.h"

#include <spdlog/spdlog.h>

#include <charconv>

#include "agent/api/compression/gzip.h"
#include "agent/api/connect/connect_error.h"
#include "agent/api/connect/message_codec.h"
#include "agent/api/connect/method_call.h"

namespace kib::api {
namespace {

using Clock = std::chrono::steady_clock;

Error invalid(std::string message) { return Error{Code::invalid_argument, std::move(message)}; }

Status check_protocol_headers(const HttpRequest& req) {
  // "Connect-Protocol-Version: 1" is accepted and not required.
  if (const std::string* v = req.header("connect-protocol-version"); v != nullptr && *v != "1")
    return invalid("unsupported connect-protocol-version \"" + *v + "\" (this server speaks 1)");
  return {};
}

// The request body, gunzipped when Content-Encoding says gzip (bounded by the body
// limit). Another encoding is unimplemented, as the spec says.
Result<std::string> request_body(const HttpRequest& req, size_t max_body_bytes) {
  const std::string* e = req.header("content-encoding");
  if (e == nullptr || *e == "identity") return req.body;
  if (*e == kGzip) return gzip_decompress(req.body, max_body_bytes);
  return Error{Code::unimplemented, "content-encoding \"" + *e + "\" is not supported (gzip is)"};
}

HttpResponse method_not_allowed() {
  HttpResponse r = connect_error_response(Error{Code::unimplemented, "only POST is supported"}, 405);
  r.headers.emplace_back("allow", "POST");
  return r;
}

}  // namespace

HttpResponse unsupported_media_type(bool streaming) {
  HttpResponse r;
  r.status = 415;
  r.headers.emplace_back("accept-post",
                         std::string(streaming ? "application/connect+json, application/connect+proto"
                                               : "application/json, application/proto") +
                             ", application/grpc, application/grpc+json, application/grpc+proto, "
                             "application/grpc-web, application/grpc-web+json, application/grpc-web+proto");
  return r;
}

Result<std::chrono::steady_clock::time_point> connect_deadline(const std::string* header,
                                                               std::chrono::steady_clock::time_point now) {
  if (header == nullptr) return Clock::time_point::max();
  const std::string& v = *header;
  uint64_t ms = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (v.empty() || v.size() > 10 || ec != std::errc() || end != v.data() + v.size() || ms == 0)
    return invalid("connect-timeout-ms must be a positive integer of at most 10 digits");
  return now + std::chrono::milliseconds(ms);
}

HttpResponse ConnectHandler::handle(const HttpRequest& req) const {
  HttpResponse r = dispatch(req);
  // One line per call at debug level; a server fault (5xx) is worth an error line.
  if (r.status >= 500)
    spdlog::error("api: {} {} from {} -> {} {}", req.method, req.path, req.peer, r.status, r.body);
  else
    spdlog::debug("api: {} {} from {} -> {}", req.method, req.path, req.peer, r.status);
  return r;
}

bool ConnectHandler::answerable(const HttpRequest& req) const {
  if (req.method != "POST") return true;
  const std::string* content_type = req.header("content-type");
  if (!codec_for_content_type(content_type ? *content_type : "")) return true;
  std::string_view path = req.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  const Method* method = registry_.find(std::string(path));
  if (method == nullptr || method->streaming) return true;
  // A unary Connect body has no framing of its own: only its Content-Length says it is whole.
  const std::string* length = req.header("content-length");
  uint64_t cl = 0;
  if (length == nullptr || req.body_too_large) return false;
  auto [end, ec] = std::from_chars(length->data(), length->data() + length->size(), cl);
  return ec == std::errc() && end == length->data() + length->size() && req.body.size() >= cl;
}

HttpResponse ConnectHandler::dispatch(const HttpRequest& req) const {
  const Clock::time_point now = Clock::now();
  if (req.method != "POST") return method_not_allowed();
  const std::string* content_type = req.header("content-type");
  auto codec = codec_for_content_type(content_type ? *content_type : "");
  if (!codec) return unsupported_media_type(false);

  if (req.body_too_large || req.body.size() > max_body_bytes_)
    return connect_error_response(
        Error{Code::resource_exhausted, "request body larger than " + std::to_string(max_body_bytes_) + " bytes"});
  if (auto st = check_protocol_headers(req); !st.ok()) return connect_error_response(st.error());

  std::string_view path = req.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  const Method* method = registry_.find(std::string(path));
  if (method == nullptr)
    return connect_error_response(Error{Code::unimplemented, "unknown method /" + std::string(path)}, 404);
  // A stream is not served by the unary protocol (connect-go answers 415 too).
  if (method->streaming) return unsupported_media_type(true);
  auto deadline = connect_deadline(req.header("connect-timeout-ms"), now);
  if (!deadline.ok()) return connect_error_response(deadline.error());

  CallContext ctx;
  ctx.deadline = *deadline;
  ctx.peer = req.peer;
  return call(*method, req, *codec, ctx);
}

HttpResponse ConnectHandler::call(const Method& method, const HttpRequest& req, Codec codec,
                                  const CallContext& ctx) const {
  try {
    auto body = request_body(req, max_body_bytes_);
    if (!body.ok()) return connect_error_response(body.error());
    auto result = call_method(method, codec, *body, ctx, "connect-timeout-ms");
    if (!result.ok()) return connect_error_response(result.error());
    auto encoded = encode_message(codec, **result);
    if (!encoded.ok()) return connect_error_response(encoded.error());
    HttpResponse r;
    r.headers.emplace_back("content-type", std::string(content_type_of(codec)));
    r.headers.emplace_back("accept-encoding", std::string(kGzip));
    if (lists_gzip(req.header("accept-encoding"))) {
      auto zipped = gzip_compress(*encoded);
      if (!zipped.ok()) return connect_error_response(zipped.error());
      r.headers.emplace_back("content-encoding", std::string(kGzip));
      encoded = std::move(zipped);
    }
    r.body = std::move(*encoded);
    return r;
  } catch (const std::exception& e) {
    return connect_error_response(Error{Code::internal, std::string("internal error: ") + e.what()});
  } catch (...) {
    return connect_error_response(Error{Code::internal, "internal error"});
  }
}

}  // namespace kib::api
