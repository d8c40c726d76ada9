// The Connect unary protocol as connectrpc.com/docs/protocol specifies it, on the
// dispatcher alone (no sockets).
#include <doctest/doctest.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <stdexcept>
#include <thread>

#include "agent/api/compression/gzip.h"
#include "agent/api/connect/connect_error.h"
#include "agent/api/connect/connect_handler.h"
#include "agent/common/utf8.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace ctrl = kibotos::ctrl::v1;
using kib::Code;
using kib::Error;
using kib::Result;
using kib::api::CallContext;
using kib::api::ConnectHandler;
using kib::api::HttpRequest;
using kib::api::HttpResponse;
using kib::api::MethodRegistry;

namespace {

const char* kGetEgress = "/kibotos.ctrl.v1.EgressService/GetEgress";

// A registry with GetEgress answering an Egress named after the request, and a few
// misbehaving methods for the error paths.
struct Fixture {
  MethodRegistry registry;
  CallContext last_ctx;
  Fixture() {
    registry.add<ctrl::GetEgressRequest, ctrl::GetEgressResponse>(
        "kibotos.ctrl.v1.EgressService/GetEgress",
        [this](const ctrl::GetEgressRequest& req, const CallContext& ctx) -> Result<ctrl::GetEgressResponse> {
          last_ctx = ctx;
          if (req.egress_id() == "missing") return Error{Code::not_found, "egress \"missing\" not found"};
          if (req.egress_id() == "throw") throw std::runtime_error("boom");
          if (req.egress_id() == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(30));
          ctrl::GetEgressResponse resp;
          resp.mutable_egress()->set_egress_id(req.egress_id());
          resp.mutable_egress()->set_revision(7);
          return resp;
        });
  }
  HttpResponse post(const std::string& path, const std::string& content_type, const std::string& body,
                    kib::api::HttpHeaders extra = {}) const {
    HttpRequest req;
    req.method = "POST";
    req.path = path;
    req.headers.emplace_back("content-type", content_type);
    for (auto& h : extra) req.headers.push_back(h);
    req.body = body;
    return ConnectHandler(registry, 1 << 20).handle(req);
  }
};

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

// The Connect error body's code and message.
std::pair<std::string, std::string> error_body(const HttpResponse& r) {
  google::protobuf::Struct s;
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.body, &s).ok());
  std::string code = s.fields().count("code") ? s.fields().at("code").string_value() : "";
  std::string message = s.fields().count("message") ? s.fields().at("message").string_value() : "";
  return {code, message};
}

}  // namespace

TEST_CASE("a JSON request gets a JSON answer with lowerCamelCase field names") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"e-1"})");
  CHECK(r.status == 200);
  CHECK(header(r, "content-type") == "application/json");
  CHECK(r.body == R"({"egress":{"egressId":"e-1","revision":"7"}})");
}

TEST_CASE("proto field names are accepted in JSON requests, as the JSON mapping says") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json; charset=utf-8", R"({"egress_id":"e-2"})");
  CHECK(r.status == 200);
  CHECK(r.body.find("\"e-2\"") != std::string::npos);
}

TEST_CASE("a binary request gets a binary answer") {
  Fixture f;
  ctrl::GetEgressRequest req;
  req.set_egress_id("e-3");
  auto r = f.post(kGetEgress, "application/proto", req.SerializeAsString());
  CHECK(r.status == 200);
  CHECK(header(r, "content-type") == "application/proto");
  ctrl::GetEgressResponse resp;
  REQUIRE(resp.ParseFromString(r.body));
  CHECK(resp.egress().egress_id() == "e-3");
  CHECK(resp.egress().revision() == 7);
}

TEST_CASE("other content types are HTTP 415") {
  Fixture f;
  for (const char* ct : {"text/plain", "application/grpc", "application/x-www-form-urlencoded", ""}) {
    auto r = f.post(kGetEgress, ct, "{}");
    CHECK(r.status == 415);
    CHECK(header(r, "accept-post").find("application/json") != std::string::npos);
  }
}

TEST_CASE("an unknown method is unimplemented with HTTP 404") {
  Fixture f;
  auto r = f.post("/kibotos.ctrl.v1.EgressService/Nope", "application/json", "{}");
  CHECK(r.status == 404);
  CHECK(header(r, "content-type") == "application/json");
  CHECK(error_body(r).first == "unimplemented");
}

TEST_CASE("only POST is served") {
  Fixture f;
  HttpRequest req;
  req.method = "GET";
  req.path = kGetEgress;
  auto r = ConnectHandler(f.registry, 1 << 20).handle(req);
  CHECK(r.status == 405);
  CHECK(header(r, "allow") == "POST");
}

TEST_CASE("a body over 1 MiB is resource_exhausted") {
  Fixture f;
  auto big = std::string((1 << 20) + 1, ' ');
  auto r = f.post(kGetEgress, "application/json", big);
  CHECK(r.status == 429);
  CHECK(error_body(r).first == "resource_exhausted");
  // Exactly the limit is still read.
  std::string at_limit = R"({"egressId":"e"})";
  at_limit.resize(1 << 20, ' ');
  CHECK(f.post(kGetEgress, "application/json", at_limit).status == 200);
}

TEST_CASE("a body the transport cut is resource_exhausted") {
  Fixture f;
  HttpRequest req;
  req.method = "POST";
  req.path = kGetEgress;
  req.headers.emplace_back("content-type", "application/json");
  req.body_too_large = true;
  auto r = ConnectHandler(f.registry, 1 << 20).handle(req);
  CHECK(error_body(r).first == "resource_exhausted");
}

TEST_CASE("an unknown JSON field is invalid_argument naming the field") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"e","egresId":"typo"})");
  CHECK(r.status == 400);
  auto [code, message] = error_body(r);
  CHECK(code == "invalid_argument");
  CHECK(message.find("egresId") != std::string::npos);
}

TEST_CASE("malformed bodies are invalid_argument") {
  Fixture f;
  CHECK(error_body(f.post(kGetEgress, "application/json", "{")).first == "invalid_argument");
  CHECK(error_body(f.post(kGetEgress, "application/json", "")).first == "invalid_argument");
  CHECK(error_body(f.post(kGetEgress, "application/proto", "\xff\xff\xff")).first == "invalid_argument");
}

TEST_CASE("handler errors become Connect error bodies with the code's HTTP status") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"missing"})");
  CHECK(r.status == 404);
  CHECK(header(r, "content-type") == "application/json");
  CHECK(r.body == R"({"code":"not_found","message":"egress \"missing\" not found"})");
}

TEST_CASE("errors are JSON even for binary requests") {
  Fixture f;
  ctrl::GetEgressRequest req;
  req.set_egress_id("missing");
  auto r = f.post(kGetEgress, "application/proto", req.SerializeAsString());
  CHECK(r.status == 404);
  CHECK(header(r, "content-type") == "application/json");
  CHECK(error_body(r).first == "not_found");
}

TEST_CASE("an exception from a handler is internal") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"throw"})");
  CHECK(r.status == 500);
  CHECK(error_body(r).first == "internal");
}

TEST_CASE("Connect-Timeout-Ms sets the call's deadline") {
  Fixture f;
  auto before = std::chrono::steady_clock::now();
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"e"})", {{"connect-timeout-ms", "5000"}});
  CHECK(r.status == 200);
  CHECK(f.last_ctx.deadline >= before + std::chrono::milliseconds(5000));
  CHECK(f.last_ctx.deadline <= std::chrono::steady_clock::now() + std::chrono::milliseconds(5000));
  f.post(kGetEgress, "application/json", R"({"egressId":"e"})");
  CHECK(f.last_ctx.deadline == std::chrono::steady_clock::time_point::max());
}

TEST_CASE("an invalid Connect-Timeout-Ms is invalid_argument") {
  Fixture f;
  for (const char* v : {"abc", "-5", "0", "12345678901", "1.5", ""}) {
    auto r = f.post(kGetEgress, "application/json", "{}", {{"connect-timeout-ms", v}});
    CHECK_MESSAGE(error_body(r).first == "invalid_argument", v);
  }
}

TEST_CASE("a handler that completes after the deadline answers deadline_exceeded") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"slow"})", {{"connect-timeout-ms", "1"}});
  CHECK(r.status == 504);
  CHECK(error_body(r).first == "deadline_exceeded");
}

TEST_CASE("Connect-Protocol-Version 1 is accepted and not required; others are invalid_argument") {
  Fixture f;
  CHECK(f.post(kGetEgress, "application/json", "{}", {{"connect-protocol-version", "1"}}).status == 200);
  CHECK(f.post(kGetEgress, "application/json", "{}").status == 200);
  auto r = f.post(kGetEgress, "application/json", "{}", {{"connect-protocol-version", "2"}});
  CHECK(error_body(r).first == "invalid_argument");
}

TEST_CASE("a gzip request body is decompressed; another encoding is unimplemented") {
  Fixture f;
  auto zipped = kib::api::gzip_compress(R"({"egressId":"e1"})");
  REQUIRE(zipped.ok());
  auto r = f.post(kGetEgress, "application/json", *zipped, {{"content-encoding", "gzip"}});
  CHECK(r.status == 200);
  CHECK(r.body.find("e1") != std::string::npos);
  CHECK(f.post(kGetEgress, "application/json", "{}", {{"content-encoding", "identity"}}).status == 200);
  CHECK(error_body(f.post(kGetEgress, "application/json", "{}", {{"content-encoding", "br"}})).first ==
        "unimplemented");
  CHECK(error_body(f.post(kGetEgress, "application/json", "{}", {{"content-encoding", "gzip"}})).first ==
        "invalid_argument");
}

TEST_CASE("a gzip body that inflates past the body limit is resource_exhausted") {
  Fixture f;
  auto bomb = kib::api::gzip_compress(std::string(2 << 20, ' ') + "{}");  // 2 MiB of JSON whitespace
  REQUIRE(bomb.ok());
  REQUIRE(bomb->size() < 16384);
  auto r = f.post(kGetEgress, "application/json", *bomb, {{"content-encoding", "gzip"}});
  CHECK(error_body(r).first == "resource_exhausted");
}

TEST_CASE("a response is gzipped when Accept-Encoding lists gzip") {
  Fixture f;
  auto r = f.post(kGetEgress, "application/json", R"({"egressId":"e1"})", {{"accept-encoding", "br, gzip;q=0.5"}});
  REQUIRE(r.status == 200);
  CHECK(header(r, "content-encoding") == "gzip");
  auto plain = kib::api::gzip_decompress(r.body, 1 << 20);
  REQUIRE(plain.ok());
  CHECK(plain->find("e1") != std::string::npos);
  CHECK(header(f.post(kGetEgress, "application/json", "{}"), "content-encoding").empty());
}

TEST_CASE("every Connect code maps to its HTTP status in error responses") {
  CHECK(kib::api::connect_error_response(Error{Code::invalid_argument, "x"}).status == 400);
  CHECK(kib::api::connect_error_response(Error{Code::unauthenticated, "x"}).status == 401);
  CHECK(kib::api::connect_error_response(Error{Code::aborted, "x"}).status == 409);
  CHECK(kib::api::connect_error_response(Error{Code::unavailable, "x"}).status == 503);
}

TEST_CASE("an error body is JSON even when its message quoted bytes that are not UTF-8") {
  auto r = kib::api::connect_error_response(Error{Code::invalid_argument, "bad \xC0\xAD id"});
  CHECK(kib::valid_utf8_prefix(r.body) == r.body.size());
  google::protobuf::Struct body;
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.body, &body).ok());
  CHECK(body.fields().at("message").string_value() == "bad \xEF\xBF\xBD\xEF\xBF\xBD id");
}
