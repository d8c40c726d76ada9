// The I/O-free cores of gRPC, gRPC-Web and Connect streaming: envelopes, status and
// trailers, grpc-timeout, the code tables, gzip, content types, and whole calls.
#include <doctest/doctest.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "agent/api/compression/gzip.h"
#include "agent/api/connect/connect_handler.h"
#include "agent/api/grpc/envelope.h"
#include "agent/api/grpc/envelope_call.h"
#include "agent/api/grpc/grpc_status.h"
#include "agent/api/grpc/rpc_protocol.h"
#include "agent/api/grpc/rpc_router.h"
#include "agent/common/utf8.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace ctrl = kibotos::ctrl::v1;
using namespace kib;
using namespace kib::api;

namespace {

std::string field(const HttpHeaders& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "";
}

// A server stream's source: one message when it opens, then one per tick it has not
// sent yet.
struct Ticks final : ServerStream {
  std::string id;
  std::shared_ptr<int> ticks;
  int sent = -1;
  Ticks(std::string id, std::shared_ptr<int> ticks) : id(std::move(id)), ticks(std::move(ticks)) {}
  Result<std::vector<MessagePtr>> poll() override {
    std::vector<MessagePtr> out;
    if (id == "fail" && sent >= 0) return Error{Code::internal, "the source failed"};
    for (; sent < *ticks; ++sent) {
      auto r = std::make_unique<ctrl::GetEgressResponse>();
      r->mutable_egress()->set_egress_id(id + std::to_string(sent + 1));
      out.push_back(std::move(r));
    }
    return out;
  }
};

struct NoWake final : CallWaker {
  void wake() const override {}
};

struct Registry {
  MethodRegistry registry;
  std::shared_ptr<int> ticks = std::make_shared<int>(0);
  Registry() {
    registry.add_server_stream<ctrl::GetEgressRequest>(
        "test.Ticks/Watch",
        [this](const ctrl::GetEgressRequest& req, const CallContext& ctx) -> Result<std::unique_ptr<ServerStream>> {
          if (!ctx.waker) return Error{Code::unimplemented, "no waker"};
          return std::unique_ptr<ServerStream>(new Ticks(req.egress_id(), ticks));
        });
    registry.add<ctrl::GetEgressRequest, ctrl::GetEgressResponse>(
        "kibotos.ctrl.v1.EgressService/GetEgress",
        [](const ctrl::GetEgressRequest& req, const CallContext&) -> Result<ctrl::GetEgressResponse> {
          if (req.egress_id() == "missing") return Error{Code::not_found, "egress \"missing\" not found: 100%"};
          ctrl::GetEgressResponse r;
          r.mutable_egress()->set_egress_id(req.egress_id());
          return r;
        });
    registry.add_stream<ctrl::GetEgressRequest, ctrl::GetEgressResponse>(
        "test.Echo/Chat", [](const ctrl::GetEgressRequest& req, const CallContext&) -> Result<ctrl::GetEgressResponse> {
          if (req.egress_id() == "stop") return Error{Code::aborted, "stopped"};
          // An error quoting bytes that are not UTF-8 (C0 AD is an overlong '-').
          if (req.egress_id() == "not-utf8") return Error{Code::invalid_argument, "bad \xC0\xAD id"};
          ctrl::GetEgressResponse r;
          r.mutable_egress()->set_egress_id(req.egress_id());
          return r;
        });
  }
};

std::string request_message(const std::string& id) {
  ctrl::GetEgressRequest req;
  req.set_egress_id(id);
  return encode_envelope(0, req.SerializeAsString());
}

HttpRequest head(const std::string& path, const std::string& content_type, HttpHeaders extra = {}) {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.headers.emplace_back("content-type", content_type);
  for (auto& h : extra) r.headers.push_back(h);
  return r;
}

// The envelopes of a response body.
std::vector<Envelope> envelopes(const std::string& body) {
  EnvelopeReader reader(1 << 20);
  reader.feed(body);
  std::vector<Envelope> out;
  for (;;) {
    auto e = reader.next();
    REQUIRE(e.ok());
    if (!*e) break;
    out.push_back(std::move(**e));
  }
  CHECK(reader.pending() == 0);
  return out;
}

struct Call {
  Registry reg;
  ConnectHandler connect{reg.registry, 1 << 20};
  RpcRouter router{reg.registry, connect};
  std::unique_ptr<StreamingCall> call;
  StreamOutput out;
  Call(const std::string& path, const std::string& content_type, HttpHeaders extra = {}) {
    call = router.open(head(path, content_type, std::move(extra)));
    REQUIRE(call != nullptr);
    call->on_body({}, false, out);
  }
  void send(const std::string& bytes, bool end = false) { call->on_body(bytes, end, out); }
};

constexpr const char* kGetEgress = "/kibotos.ctrl.v1.EgressService/GetEgress";

}  // namespace

TEST_CASE("envelopes are cut only when whole, across any split") {
  const std::string wire = encode_envelope(0, "hello") + encode_envelope(Envelope::kCompressed, "");
  for (size_t split = 0; split <= wire.size(); ++split) {
    EnvelopeReader r(100);
    r.feed(wire.substr(0, split));
    std::vector<Envelope> got;
    for (auto e = r.next(); e.ok() && *e; e = r.next()) got.push_back(**e);
    r.feed(wire.substr(split));
    for (auto e = r.next(); e.ok() && *e; e = r.next()) got.push_back(**e);
    REQUIRE(got.size() == 2);
    CHECK(got[0].payload == "hello");
    CHECK(got[1].flags == Envelope::kCompressed);
    CHECK(r.pending() == 0);
  }
}

TEST_CASE("an envelope announcing more than the limit is resource_exhausted from its prefix alone") {
  EnvelopeReader r(4);
  r.feed(std::string("\0\0\0\0\5", 5));
  auto e = r.next();
  REQUIRE(!e.ok());
  CHECK(e.error().code == Code::resource_exhausted);
}

TEST_CASE("the gRPC status number is the Connect code's (the spec's table)") {
  struct Row {
    Code code;
    const char* name;
    int number;
  };
  const Row rows[] = {
      {Code::ok, "ok", 0},
      {Code::canceled, "canceled", 1},
      {Code::unknown, "unknown", 2},
      {Code::invalid_argument, "invalid_argument", 3},
      {Code::deadline_exceeded, "deadline_exceeded", 4},
      {Code::not_found, "not_found", 5},
      {Code::already_exists, "already_exists", 6},
      {Code::permission_denied, "permission_denied", 7},
      {Code::resource_exhausted, "resource_exhausted", 8},
      {Code::failed_precondition, "failed_precondition", 9},
      {Code::aborted, "aborted", 10},
      {Code::out_of_range, "out_of_range", 11},
      {Code::unimplemented, "unimplemented", 12},
      {Code::internal, "internal", 13},
      {Code::unavailable, "unavailable", 14},
      {Code::data_loss, "data_loss", 15},
      {Code::unauthenticated, "unauthenticated", 16},
  };
  for (const auto& row : rows) {
    CHECK(grpc_status_number(row.code) == row.number);
    CHECK(code_name(row.code) == row.name);
    CHECK(code_from_grpc_status(std::to_string(row.number)) == row.code);
  }
  CHECK(!code_from_grpc_status("17"));
  CHECK(!code_from_grpc_status("-1"));
  CHECK(!code_from_grpc_status("1x"));
}

TEST_CASE("an HTTP status without a gRPC status maps as the Connect spec's table says") {
  const std::pair<int, Code> rows[] = {{400, Code::internal},          {401, Code::unauthenticated},
                                       {403, Code::permission_denied}, {404, Code::unimplemented},
                                       {429, Code::unavailable},       {502, Code::unavailable},
                                       {503, Code::unavailable},       {504, Code::unavailable},
                                       {500, Code::unknown},           {415, Code::unknown}};
  for (auto [http, code] : rows) CHECK(code_for_http_status(http) == code);
}

TEST_CASE("grpc-message is percent-encoded outside printable ASCII and for '%'") {
  CHECK(percent_encode_grpc_message("plain text") == "plain text");
  CHECK(percent_encode_grpc_message("100%") == "100%25");
  CHECK(percent_encode_grpc_message("a\nb") == "a%0Ab");
  CHECK(percent_encode_grpc_message("\xc3\xa9") == "%C3%A9");
}

TEST_CASE("grpc-message carries only UTF-8: bytes that are not are replaced with U+FFFD") {
  auto fields = kib::api::grpc_status_fields(Error{Code::invalid_argument, "bad \xC0\xAD id"});
  CHECK(field(fields, "grpc-message") == "bad %EF%BF%BD%EF%BF%BD id");
}

TEST_CASE("grpc-timeout: up to 8 digits and a unit") {
  using namespace std::chrono;
  const std::pair<const char*, nanoseconds> good[] = {{"1H", hours(1)},
                                                      {"2M", minutes(2)},
                                                      {"3S", seconds(3)},
                                                      {"4m", milliseconds(4)},
                                                      {"5u", microseconds(5)},
                                                      {"6n", nanoseconds(6)},
                                                      {"99999999S", seconds(99999999)}};
  for (auto [text, value] : good) {
    auto t = parse_grpc_timeout(text);
    REQUIRE(t.ok());
    CHECK(*t == value);
  }
  for (const char* bad : {"", "S", "1", "1s", "123456789S", "-1S", "+1S", "1.5S", " 1S"}) {
    auto t = parse_grpc_timeout(bad);
    CHECK_MESSAGE(!t.ok(), bad);
  }
  auto huge = parse_grpc_timeout("99999999H");
  REQUIRE(huge.ok());
  CHECK(*huge == nanoseconds::max());
}

TEST_CASE("gzip round-trips; corrupt data is invalid_argument; a bomb is resource_exhausted") {
  auto z = gzip_compress("hello hello hello");
  REQUIRE(z.ok());
  auto back = gzip_decompress(*z, 100);
  REQUIRE(back.ok());
  CHECK(*back == "hello hello hello");
  CHECK(gzip_decompress("not gzip", 100).error().code == Code::invalid_argument);
  CHECK(gzip_decompress(z->substr(0, z->size() - 4), 100).error().code == Code::invalid_argument);
  auto bomb = gzip_compress(std::string(64 << 20, 'a'));
  REQUIRE(bomb.ok());
  CHECK(gzip_decompress(*bomb, 1 << 20).error().code == Code::resource_exhausted);
  CHECK(gzip_decompress(*z, 16).error().code == Code::resource_exhausted);
  CHECK(gzip_decompress(*z, 17).ok());
}

TEST_CASE("encoding lists name gzip with or without parameters") {
  const std::pair<const char*, bool> rows[] = {
      {"gzip", true}, {"identity, gzip", true}, {"GZIP;q=0.1", true}, {"identity,deflate,gzip", true},
      {"br", false},  {"gzipx", false},         {"", false}};
  for (const auto& row : rows) {  // no structured binding: CHECK_MESSAGE captures it (clang 14)
    const char* text = row.first;
    const bool want = row.second;
    std::string h = text;
    CHECK_MESSAGE(lists_gzip(&h) == want, text);
  }
  CHECK(!lists_gzip(nullptr));
}

TEST_CASE("content types pick the protocol and codec as connect-go does") {
  struct Row {
    const char* type;
    RpcProtocol protocol;
    Codec codec;
  };
  const Row rows[] = {
      {"application/json", RpcProtocol::connect_unary, Codec::json},
      {"application/proto", RpcProtocol::connect_unary, Codec::proto},
      {"application/connect+proto", RpcProtocol::connect_stream, Codec::proto},
      {"application/connect+json", RpcProtocol::connect_stream, Codec::json},
      {"application/grpc", RpcProtocol::grpc, Codec::proto},
      {"application/grpc+proto", RpcProtocol::grpc, Codec::proto},
      {"Application/GRPC+json; charset=utf-8", RpcProtocol::grpc, Codec::json},
      {"application/grpc-web", RpcProtocol::grpc_web, Codec::proto},
      {"application/grpc-web+proto", RpcProtocol::grpc_web, Codec::proto},
      {"application/grpc-web+json", RpcProtocol::grpc_web, Codec::json},
  };
  for (const auto& row : rows) {
    auto t = classify_content_type(row.type);
    REQUIRE_MESSAGE(t.has_value(), row.type);
    CHECK(t->protocol == row.protocol);
    CHECK(t->codec == row.codec);
  }
  for (const char* bad : {"text/plain", "application/grpc+thrift", "application/grpc-web-text", "application/connect",
                          "application/grpcx", ""})
    CHECK_MESSAGE(!classify_content_type(bad), bad);
}

TEST_CASE("a gRPC unary call is answered once its message is whole, before the request ends") {
  Call c(kGetEgress, "application/grpc");
  CHECK(!c.out.head);
  const std::string msg = request_message("e1");
  c.send(msg.substr(0, 3));
  CHECK(!c.out.head);
  c.send(msg.substr(3));  // request side still open
  REQUIRE(c.out.finished);
  CHECK(c.out.status == 200);
  CHECK(field(c.out.headers, "content-type") == "application/grpc+proto");
  CHECK(field(c.out.trailers, "grpc-status") == "0");
  auto env = envelopes(c.out.data);
  REQUIRE(env.size() == 1);
  ctrl::GetEgressResponse resp;
  REQUIRE(resp.ParseFromString(env[0].payload));
  CHECK(resp.egress().egress_id() == "e1");
}

TEST_CASE("a gRPC error with no message is Trailers-Only, its message percent-encoded") {
  Call c(kGetEgress, "application/grpc+proto");
  c.send(request_message("missing"), true);
  REQUIRE(c.out.finished);
  CHECK(c.out.data.empty());
  CHECK(c.out.trailers.empty());
  CHECK(field(c.out.headers, "grpc-status") == "5");
  CHECK(field(c.out.headers, "grpc-message") == "egress \"missing\" not found: 100%25");
}

TEST_CASE("an unknown gRPC method is refused with the headers alone") {
  Call c("/kibotos.ctrl.v1.EgressService/Nope", "application/grpc");
  REQUIRE(c.out.finished);
  CHECK(field(c.out.headers, "grpc-status") == "12");
}

TEST_CASE("a bad grpc-timeout or an unknown grpc-encoding is refused with the headers") {
  Call t(kGetEgress, "application/grpc", {{"grpc-timeout", "soon"}});
  CHECK(field(t.out.headers, "grpc-status") == "3");
  Call e(kGetEgress, "application/grpc", {{"grpc-encoding", "snappy"}});
  CHECK(field(e.out.headers, "grpc-status") == "12");
  CHECK(field(e.out.headers, "grpc-accept-encoding") == "gzip");
}

TEST_CASE("an expired grpc-timeout is deadline_exceeded") {
  Call c(kGetEgress, "application/grpc", {{"grpc-timeout", "1n"}});
  c.send(request_message("e1"), true);
  CHECK(field(c.out.headers, "grpc-status") == "4");
}

TEST_CASE("a unary request that ends without a message, or inside one, is an error") {
  Call none(kGetEgress, "application/grpc");
  none.send("", true);
  CHECK(field(none.out.headers, "grpc-status") == "12");
  Call cut(kGetEgress, "application/grpc");
  cut.send(request_message("e1").substr(0, 6), true);
  CHECK(field(cut.out.headers, "grpc-status") == "3");
}

TEST_CASE("gzip messages in and out under grpc-encoding; a bomb is resource_exhausted") {
  ctrl::GetEgressRequest req;
  req.set_egress_id("zipped");
  auto zipped = gzip_compress(req.SerializeAsString());
  REQUIRE(zipped.ok());
  Call c(kGetEgress, "application/grpc", {{"grpc-encoding", "gzip"}});
  c.send(encode_envelope(Envelope::kCompressed, *zipped), true);
  CHECK(field(c.out.headers, "grpc-encoding") == "gzip");
  CHECK(field(c.out.trailers, "grpc-status") == "0");
  auto env = envelopes(c.out.data);
  REQUIRE(env.size() == 1);
  CHECK(env[0].flags == Envelope::kCompressed);
  auto plain = gzip_decompress(env[0].payload, 1 << 20);
  REQUIRE(plain.ok());
  ctrl::GetEgressResponse resp;
  REQUIRE(resp.ParseFromString(*plain));
  CHECK(resp.egress().egress_id() == "zipped");

  auto bomb = gzip_compress(std::string(8 << 20, '\0'));
  REQUIRE(bomb.ok());
  Call b(kGetEgress, "application/grpc", {{"grpc-encoding", "gzip"}});
  b.send(encode_envelope(Envelope::kCompressed, *bomb), true);
  CHECK(field(b.out.headers, "grpc-status") == "8");

  Call flagged(kGetEgress, "application/grpc");  // compressed flag without grpc-encoding
  flagged.send(encode_envelope(Envelope::kCompressed, *zipped), true);
  CHECK(field(flagged.out.headers, "grpc-status") == "13");
}

TEST_CASE("responses are gzipped when grpc-accept-encoding lists gzip") {
  Call c(kGetEgress, "application/grpc", {{"grpc-accept-encoding", "identity,deflate,gzip"}});
  c.send(request_message("e1"), true);
  CHECK(field(c.out.headers, "grpc-encoding") == "gzip");
  CHECK(envelopes(c.out.data).at(0).flags == Envelope::kCompressed);
}

TEST_CASE("gRPC-Web puts the trailers in the body, after the messages") {
  Call c(kGetEgress, "application/grpc-web+json");
  c.send(encode_envelope(0, R"({"egressId":"w1"})"), true);
  REQUIRE(c.out.finished);
  CHECK(c.out.trailers.empty());
  CHECK(field(c.out.headers, "content-type") == "application/grpc-web+json");
  auto env = envelopes(c.out.data);
  REQUIRE(env.size() == 2);
  CHECK(env[0].payload.find("w1") != std::string::npos);
  CHECK(env[1].flags == Envelope::kWebTrailers);
  CHECK(env[1].payload == "grpc-status: 0\r\n");

  Call e(kGetEgress, "application/grpc-web");
  e.send(request_message("missing"), true);
  auto err = envelopes(e.out.data);
  REQUIRE(err.size() == 1);
  CHECK(err[0].payload.starts_with("grpc-status: 5\r\ngrpc-message: egress"));
}

TEST_CASE("Connect streaming ends with an end-of-stream message") {
  Call c("/test.Echo/Chat", "application/connect+json");
  c.send(encode_envelope(0, R"({"egressId":"a"})"));
  c.send(encode_envelope(0, R"({"egressId":"b"})"));
  CHECK(!c.out.finished);
  c.send("", true);
  auto env = envelopes(c.out.data);
  REQUIRE(env.size() == 3);
  CHECK(env[2].flags == Envelope::kConnectEndStream);
  CHECK(env[2].payload == "{}");

  Call e("/test.Echo/Chat", "application/connect+json");
  e.send(encode_envelope(0, R"({"egressId":"stop"})"));
  auto err = envelopes(e.out.data);
  REQUIRE(err.size() == 1);
  google::protobuf::Struct end;  // field order is the JSON printer's: compare values
  REQUIRE(google::protobuf::util::JsonStringToMessage(err[0].payload, &end).ok());
  const auto& error = end.fields().at("error").struct_value().fields();
  CHECK(error.at("code").string_value() == "aborted");
  CHECK(error.at("message").string_value() == "stopped");
}

TEST_CASE("a Connect end-of-stream error is valid JSON even when its message quoted bytes that are not UTF-8") {
  Call e("/test.Echo/Chat", "application/connect+json");
  e.send(encode_envelope(0, R"({"egressId":"not-utf8"})"));
  auto err = envelopes(e.out.data);
  REQUIRE(err.size() == 1);
  CHECK(kib::valid_utf8_prefix(err[0].payload) == err[0].payload.size());
  google::protobuf::Struct end;
  REQUIRE(google::protobuf::util::JsonStringToMessage(err[0].payload, &end).ok());
  CHECK(end.fields().at("error").struct_value().fields().at("message").string_value() ==
        "bad \xEF\xBF\xBD\xEF\xBF\xBD id");
}

TEST_CASE("a bidirectional stream answers each message as it arrives and ends with the request") {
  Call c("/test.Echo/Chat", "application/grpc");
  c.send(request_message("one"));
  auto first = envelopes(c.out.data);
  REQUIRE(first.size() == 1);
  CHECK(!c.out.finished);
  c.out.data.clear();
  c.send(request_message("two"));
  CHECK(envelopes(c.out.data).size() == 1);
  c.send("", true);
  CHECK(c.out.finished);
  CHECK(field(c.out.trailers, "grpc-status") == "0");
}

TEST_CASE("a stream is refused by the unary protocol with 415, as connect-go does") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  HttpRequest r = head("/test.Echo/Chat", "application/json");
  r.body = "{}";
  CHECK(connect.handle(r).status == 415);
  CHECK(connect.answerable(r));
}

TEST_CASE("a Connect streaming request to a unary method is 415, as connect-go answers") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  for (const char* type : {"application/connect+proto", "application/connect+json"}) {
    CAPTURE(type);
    HttpRequest r = head(kGetEgress, type);
    // Over HTTP/2 it is not opened as a stream but refused from its headers...
    CHECK(router.open(r) == nullptr);
    CHECK(router.answerable(r));
    // ...and over HTTP/1.1 (a whole body) refused alike.
    r.body = request_message("e1");
    HttpResponse out = router.handle(r);
    CHECK(out.status == 415);
    CHECK(field(out.headers, "accept-post").starts_with("application/json, application/proto"));
  }
}

TEST_CASE("a unary method over gRPC and gRPC-Web, and a stream over Connect streaming, are served") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  for (const char* type : {"application/grpc", "application/grpc+json", "application/grpc-web+proto"})
    CHECK(router.open(head(kGetEgress, type)) != nullptr);
  CHECK(router.open(head("/test.Echo/Chat", "application/connect+proto")) != nullptr);
  CHECK(!router.answerable(head("/test.Echo/Chat", "application/connect+proto")));
}

TEST_CASE("a stream over the Connect unary content types is 415 naming the streaming ones") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  HttpRequest r = head("/test.Echo/Chat", "application/proto");
  HttpResponse out = connect.handle(r);
  CHECK(out.status == 415);
  CHECK(field(out.headers, "accept-post").starts_with("application/connect+json, application/connect+proto"));
}

std::string egress_id_of(const Envelope& e) {
  ctrl::GetEgressResponse r;
  REQUIRE(r.ParseFromString(e.payload));
  return r.egress().egress_id();
}

TEST_CASE("a server stream answers at once, stays open past the request's end, and sends on each wake") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  HttpRequest req = head("/test.Ticks/Watch", "application/grpc");
  req.waker = std::make_shared<NoWake>();
  auto call = router.open(req);
  REQUIRE(call != nullptr);
  StreamOutput out;
  call->on_body(request_message("t"), true, out);
  CHECK(out.head);
  REQUIRE(envelopes(out.data).size() == 1);
  CHECK(egress_id_of(envelopes(out.data)[0]) == "t0");
  CHECK(!out.finished);
  CHECK(call->waiting());

  StreamOutput woken;
  call->on_wake(woken);  // nothing new
  CHECK(woken.data.empty());
  *reg.ticks = 2;
  call->on_wake(woken);
  auto two = envelopes(woken.data);
  REQUIRE(two.size() == 2);
  CHECK(egress_id_of(two[1]) == "t2");
  CHECK(!woken.finished);

  StreamOutput stopped;
  call->on_stop(stopped);
  CHECK(stopped.finished);
  CHECK(field(stopped.trailers, "grpc-status") == "14");  // unavailable: reconnect elsewhere
  CHECK(!call->waiting());
}

TEST_CASE("a server stream's source error ends it with that error") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  HttpRequest req = head("/test.Ticks/Watch", "application/grpc-web");
  req.waker = std::make_shared<NoWake>();
  auto call = router.open(req);
  StreamOutput out;
  call->on_body(request_message("fail"), true, out);
  CHECK(!out.finished);
  call->on_wake(out);
  CHECK(out.finished);
  auto all = envelopes(out.data);
  REQUIRE(all.size() == 2);
  CHECK(all[1].payload.find("grpc-status: 13") != std::string::npos);
}

TEST_CASE("a server stream takes one request message, and needs one") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  HttpRequest req = head("/test.Ticks/Watch", "application/grpc");
  req.waker = std::make_shared<NoWake>();
  auto twice = router.open(req);
  StreamOutput out;
  twice->on_body(request_message("a") + request_message("b"), false, out);
  CHECK(out.finished);
  CHECK(field(out.trailers, "grpc-status") == "3");
  auto none = router.open(req);
  StreamOutput empty;
  none->on_body({}, true, empty);
  CHECK(empty.finished);
  CHECK(field(empty.headers, "grpc-status") == "12");
}

TEST_CASE("a server stream where the transport cannot wake (HTTP/1.1) gets the method's refusal") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  HttpRequest web = head("/test.Ticks/Watch", "application/grpc-web");
  web.body = request_message("h1");
  auto r = router.handle(web);
  auto all = envelopes(r.body);
  REQUIRE(all.size() == 1);
  CHECK(all[0].payload.find("grpc-status: 12") != std::string::npos);
}

TEST_CASE("over HTTP/1.1 gRPC-Web is served whole and gRPC is refused Trailers-Only") {
  Registry reg;
  ConnectHandler connect(reg.registry, 1 << 20);
  RpcRouter router(reg.registry, connect);
  HttpRequest web = head(kGetEgress, "application/grpc-web");
  web.body = request_message("h1");
  auto r = router.handle(web);
  CHECK(r.status == 200);
  CHECK(envelopes(r.body).size() == 2);
  HttpRequest grpc = head(kGetEgress, "application/grpc");
  grpc.body = request_message("h1");
  CHECK(field(router.handle(grpc).headers, "grpc-status") == "12");
  HttpRequest connect_unary = head(kGetEgress, "application/json");
  connect_unary.body = "{}";
  CHECK(router.handle(connect_unary).status == 200);
  CHECK(router.open(connect_unary) == nullptr);
}
