// GetRoute: GET of its path answers its text; the same path with another method is
// 405; every other request reaches the next handler unchanged.
#include <doctest/doctest.h>

#include <stdexcept>

#include "agent/api/http/get_route.h"

using kib::Code;
using kib::Error;
using kib::Result;
using kib::api::GetRoute;
using kib::api::HttpHandler;
using kib::api::HttpRequest;
using kib::api::HttpResponse;

namespace {

// Answers 299 with the path it saw, so a request passed on shows.
struct Next final : HttpHandler {
  HttpResponse handle(const HttpRequest& r) const override {
    HttpResponse out;
    out.status = 299;
    out.body = r.method + " " + r.path;
    return out;
  }
  size_t max_body_bytes() const override { return 1234; }
};

HttpRequest request(std::string method, std::string path) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  return r;
}

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

}  // namespace

TEST_CASE("GetRoute: GET of its path answers the text with its content type") {
  Next next;
  GetRoute route(
      "/metrics", "text/plain; version=0.0.4", [] { return Result<std::string>("a 1\n"); }, next);
  auto r = route.handle(request("GET", "/metrics"));
  CHECK(r.status == 200);
  CHECK(r.body == "a 1\n");
  CHECK(header(r, "content-type") == "text/plain; version=0.0.4");
  CHECK(route.max_body_bytes() == 1234);
}

TEST_CASE("GetRoute: other paths and methods reach the next handler; its path with POST is 405") {
  Next next;
  int calls = 0;
  GetRoute route(
      "/metrics", "text/plain",
      [&] {
    ++calls;
    return Result<std::string>("x");
      },
      next);
  auto other = route.handle(request("POST", "/kibotos.ctrl.v1.AgentService/GetAgent"));
  CHECK(other.status == 299);
  CHECK(other.body == "POST /kibotos.ctrl.v1.AgentService/GetAgent");
  CHECK(route.handle(request("GET", "/metrics/x")).status == 299);
  auto post = route.handle(request("POST", "/metrics"));
  CHECK(post.status == 405);
  CHECK(header(post, "allow") == "GET");
  CHECK(calls == 0);
}

TEST_CASE("GetRoute: a failing body is the API's error, with its code's HTTP status") {
  Next next;
  GetRoute failing(
      "/metrics", "text/plain",
      [] {
    return Result<std::string>(Error{Code::unavailable, "store busy"});
      },
      next);
  auto r = failing.handle(request("GET", "/metrics"));
  CHECK(r.status == 503);
  CHECK(r.body.find("store busy") != std::string::npos);
  GetRoute throwing(
      "/metrics", "text/plain", []() -> Result<std::string> { throw std::runtime_error("boom"); }, next);
  auto t = throwing.handle(request("GET", "/metrics"));
  CHECK(t.status == 500);
  CHECK(t.body.find("boom") != std::string::npos);
}
