#include "agent/api/http/get_route.h"

#include <spdlog/spdlog.h>

#include "agent/api/connect/connect_error.h"

namespace kib::api {
HttpResponse GetRoute::handle(const HttpRequest& request) const {
  if (request.path != path_) return next_.handle(request);
  if (request.method != "GET") {
    HttpResponse r = connect_error_response(Error{Code::unimplemented, "only GET is supported on " + path_}, 405);
    r.headers.emplace_back("allow", "GET");
    return r;
  }
  try {
    auto body = body_();
    if (!body.ok()) {
      spdlog::error("api: GET {} from {}: {}", path_, request.peer, body.error().message);
      return connect_error_response(body.error());  // the API's error shape and status
    }
    HttpResponse r;
    r.headers.emplace_back("content-type", content_type_);
    r.body = std::move(*body);
    return r;
  } catch (const std::exception& e) {
    return connect_error_response(Error{Code::internal, std::string("internal error: ") + e.what()});
  }
}

}  // namespace kib::api
