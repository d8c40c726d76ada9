#pragma once
// One plain GET resource beside the Connect methods (the metrics endpoint): GET of
// its path answers the text its function makes; every other request goes on to next.
#include <functional>
#include <string>
#include <utility>

#include "agent/api/http/http_message.h"
#include "agent/common/result.h"

namespace kib::api {

class GetRoute final : public HttpHandler {
 public:
  using Body = std::function<Result<std::string>()>;
  // next must outlive the route.
  GetRoute(std::string path, std::string content_type, Body body, const HttpHandler& next)
      : path_(std::move(path)), content_type_(std::move(content_type)), body_(std::move(body)), next_(next) {}

  HttpResponse handle(const HttpRequest& request) const override;
  size_t max_body_bytes() const override { return next_.max_body_bytes(); }
  bool answerable(const HttpRequest& so_far) const override { return so_far.path == path_ || next_.answerable(so_far); }
  std::unique_ptr<StreamingCall> open(const HttpRequest& head) const override {
    return head.path == path_ ? nullptr : next_.open(head);
  }

 private:
  std::string path_;
  std::string content_type_;
  Body body_;
  const HttpHandler& next_;
};

}  // namespace kib::api
