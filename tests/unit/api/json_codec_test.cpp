// The JSON codec's refusals that protobuf's parser does not make itself: a key given
// twice, and syntax errors reported by position rather than by the request's bytes.
#include <doctest/doctest.h>

#include <string>

#include "agent/api/connect/json_keys.h"
#include "agent/api/connect/message_codec.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace ctrl = kibotos::ctrl::v1;
using kib::Code;
using kib::api::Codec;
using kib::api::decode_message;

namespace {

// The error message of decoding `json` as a CreateEgressRequest, "" if it decoded.
std::string refusal(const std::string& json) {
  ctrl::CreateEgressRequest req;
  auto st = decode_message(Codec::json, json, req);
  if (st.ok()) return "";
  CHECK(st.error().code == Code::invalid_argument);
  return st.error().message;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a field given twice under one name is invalid_argument naming it, and nothing is decoded") {
  ctrl::CreateEgressRequest req;
  auto st = decode_message(Codec::json, R"({"commandId":"A","commandId":"B"})", req);
  REQUIRE(!st.ok());
  CHECK(st.error().code == Code::invalid_argument);
  CHECK(contains(st.error().message, "kibotos.ctrl.v1.CreateEgressRequest.command_id is given twice"));
  CHECK(req.command_id().empty());
}

TEST_CASE("a field's JSON name and its proto name are the same key") {
  const std::string m = refusal(R"({"commandId":"A","command_id":"B"})");
  CHECK(contains(m, "command_id is given twice (as \"commandId\" and \"command_id\")"));
  CHECK(contains(refusal(R"({command_id:'A', "commandId":"B"})"), "given twice"));
  // An escape spells the same key.
  CHECK(contains(refusal(R"({"commandId":"A","command\u005fid":"B"})"), "given twice"));
}

TEST_CASE("keys given twice in nested messages and in maps are refused too") {
  CHECK(contains(refusal(R"({"spec":{"socks5":{"address":"a:1","address":"b:2"}}})"),
                 "kibotos.ctrl.v1.Socks5Egress.address is given twice"));
  CHECK(contains(refusal(R"({"spec":{"socks5":{"tls":{"serverName":"a","server_name":"b"}}}})"),
                 "EgressTls.server_name is given twice"));
  // protobuf refuses a map key given twice itself ("Repeated map key").
  CHECK(contains(refusal(R"({"labels":{"team":"a","team":"b"}})"), "team"));
}

TEST_CASE("distinct keys, trailing commas and the other forms protobuf reads are accepted") {
  CHECK(refusal(R"({"commandId":"A","labels":{"a":"1","b":"2"},"spec":{"socks5":{"address":"h:1"}}})") == "");
  CHECK(refusal(R"({"labels":{"commandId":"1","command_id":"2"}})") == "");  // map keys are not fields
  CHECK(refusal(R"({"commandId":"A",})") == "");
  CHECK(refusal("{ 'commandId' : \"x\\\"y\" , \"spec\" : { \"udpEnabled\" : true } }") == "");
  CHECK(refusal("{}") == "");
}

TEST_CASE("a JSON syntax error says where, not what the request held there") {
  const std::string m = refusal(R"({"spec":{"socks5":{"password": hunter2secret}}})");
  CHECK(contains(m, "at line 1, column 32"));
  CHECK(!contains(m, "hunter2"));
  CHECK(!contains(m, "\n"));
  const std::string unterminated = refusal("{\n  \"commandId\": \"s3cr3t-value");
  CHECK(contains(unterminated, "line 2"));
  CHECK(!contains(unterminated, "s3cr3t"));
}

TEST_CASE("JSON that is not UTF-8 is refused at the first byte that is not") {
  const std::string m = refusal("{\"commandId\":\"ab\xC0\xAD\"}");
  CHECK(contains(m, "at line 1, column 17"));
  CHECK(!contains(m, "\xC0"));
}

TEST_CASE("positions count lines and byte columns from 1") {
  CHECK(kib::api::text_position("abc", 0) == "line 1, column 1");
  CHECK(kib::api::text_position("a\nbc", 3) == "line 2, column 2");
  CHECK(kib::api::json_syntax_error_offset(R"({"a":1})") == std::nullopt);
  CHECK(kib::api::json_syntax_error_offset(R"({"a" 1})") == 5u);
}
