#include "agent/api/grpc/envelope_call.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "agent/api/compression/gzip.h"
#include "agent/api/connect/method_call.h"
#include "agent/api/grpc/grpc_status.h"
#include "agent/common/utf8.h"

namespace kib::api {
namespace {

// Connect's end-of-stream message: {} on success, {"error":{"code","message"}}.
std::string connect_end_stream(const Status& status) {
  if (status.ok()) return "{}";
  google::protobuf::Struct end;
  auto& error = *(*end.mutable_fields())["error"].mutable_struct_value()->mutable_fields();
  error["code"].set_string_value(std::string(code_name(status.error().code)));
  // Messages may quote request bytes: JSON strings must be UTF-8 whatever they were.
  if (!status.error().message.empty()) error["message"].set_string_value(to_valid_utf8(status.error().message));
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(end, &out).ok()) return R"({"error":{"code":"internal"}})";
  return out;
}

}  // namespace

void EnvelopeCall::on_body(std::string_view data, bool end, StreamOutput& out) {
  if (finished_) return;
  if (setup_.refusal) return finish(*setup_.refusal, out);
  reader_.feed(data);
  while (!finished_) {
    auto envelope = reader_.next();
    if (!envelope.ok()) return finish(envelope.error(), out);
    if (!*envelope) break;
    handle_message(std::move(**envelope), out);
  }
  if (finished_ || !end) return;
  if (reader_.pending() > 0) return finish(Error{Code::invalid_argument, "the request ends inside a message"}, out);
  if (!setup_.method->streaming)  // connect-go's words and code for it
    return finish(Error{Code::unimplemented, "unary request has no message"}, out);
  if (setup_.method->open_stream) {
    // A server stream goes on after its request side ends: that is its normal shape.
    if (!source_) finish(Error{Code::unimplemented, "server streaming request has no message"}, out);
    return;
  }
  finish(Status{}, out);
}

void EnvelopeCall::on_wake(StreamOutput& out) {
  if (source_ && !finished_) poll_source(out);
}

void EnvelopeCall::on_stop(StreamOutput& out) {
  if (source_ && !finished_) finish(Error{Code::unavailable, "the agent is stopping"}, out);
}

void EnvelopeCall::open_server_stream(const std::string& payload, StreamOutput& out) {
  if (source_) return finish(Error{Code::invalid_argument, "a server stream takes one request message"}, out);
  auto source = open_method_stream(*setup_.method, setup_.type.codec, payload, setup_.context);
  if (!source.ok()) return finish(source.error(), out);
  source_ = std::move(*source);
  // The head goes out at once: a client sees the stream accepted before its first event.
  send_head(out);
  poll_source(out);
}

void EnvelopeCall::poll_source(StreamOutput& out) {
  auto messages = source_->poll();
  if (!messages.ok()) return finish(messages.error(), out);
  for (const auto& m : *messages) {
    if (finished_) return;
    send_message(*m, out);
  }
}

void EnvelopeCall::handle_message(Envelope envelope, StreamOutput& out) {
  if (envelope.flags & ~Envelope::kCompressed)
    return finish(Error{Code::invalid_argument, "unexpected flags on a request message"}, out);
  std::string payload = std::move(envelope.payload);
  if (envelope.flags & Envelope::kCompressed) {
    if (!setup_.request_gzip)
      return finish(Error{Code::internal, "a compressed message without a message encoding"}, out);
    auto plain = gzip_decompress(payload, setup_.max_message_bytes);
    if (!plain.ok()) return finish(plain.error(), out);
    payload = std::move(*plain);
  }
  if (setup_.method->open_stream) return open_server_stream(payload, out);
  auto result = call_method(*setup_.method, setup_.type.codec, payload, setup_.context, "its timeout");
  if (!result.ok()) return finish(std::move(result).error(), out);
  send_message(**result, out);
  if (!finished_ && !setup_.method->streaming) finish(Status{}, out);
}

void EnvelopeCall::send_message(const google::protobuf::Message& message, StreamOutput& out) {
  auto encoded = encode_message(setup_.type.codec, message);
  if (!encoded.ok()) return finish(encoded.error(), out);
  uint8_t flags = 0;
  if (setup_.response_gzip) {
    auto zipped = gzip_compress(*encoded);
    if (!zipped.ok()) return finish(zipped.error(), out);
    encoded = std::move(zipped);
    flags = Envelope::kCompressed;
  }
  send_head(out);
  out.data += encode_envelope(flags, *encoded);
}

void EnvelopeCall::send_head(StreamOutput& out) {
  if (head_sent_) return;
  head_sent_ = true;
  out.head = true;
  out.status = 200;
  out.headers.emplace_back("content-type", response_content_type(setup_.type));
  const bool connect = setup_.type.protocol == RpcProtocol::connect_stream;
  out.headers.emplace_back(connect ? "connect-accept-encoding" : "grpc-accept-encoding", std::string(kGzip));
  if (setup_.response_gzip)
    out.headers.emplace_back(connect ? "connect-content-encoding" : "grpc-encoding", std::string(kGzip));
}

void EnvelopeCall::finish(const Status& status, StreamOutput& out) {
  if (finished_) return;
  finished_ = true;
  source_.reset();  // a Watch stops watching now, not when its stream is closed
  const bool trailers_only = !head_sent_;
  send_head(out);
  out.finished = true;
  switch (setup_.type.protocol) {
    case RpcProtocol::grpc:
      // An answer with no message is "Trailers-Only": the status rides in the headers.
      for (auto& f : grpc_status_fields(status)) (trailers_only ? out.headers : out.trailers).push_back(std::move(f));
      break;
    case RpcProtocol::grpc_web:
      out.data += encode_envelope(Envelope::kWebTrailers, grpc_web_trailers_block(grpc_status_fields(status)));
      break;
    case RpcProtocol::connect_stream:
    case RpcProtocol::connect_unary:
      out.data += encode_envelope(Envelope::kConnectEndStream, connect_end_stream(status));
      break;
  }
}

}  // namespace kib::api
