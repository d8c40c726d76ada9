#pragma once
// One call of a length-prefixed protocol (gRPC, gRPC-Web, Connect streaming), fed its
// request body as it arrives: each whole request message goes to the method at once,
// so a unary call is answered when its message is complete, even while the client
// keeps its side open, and a bidirectional stream answers message by message. Only
// the end of the response differs between the protocols: HTTP/2 trailers (gRPC), a
// trailers envelope (gRPC-Web) or an end-of-stream envelope (Connect).
#include <cstddef>
#include <optional>
#include <string>

#include "agent/api/connect/method_registry.h"
#include "agent/api/grpc/envelope.h"
#include "agent/api/grpc/rpc_protocol.h"
#include "agent/api/http/http_message.h"

namespace kib::api {

struct EnvelopeCallSetup {
  RpcContentType type{RpcProtocol::grpc, Codec::proto};
  // The method, or nullptr with `refusal` set: the call then only answers that error.
  const Method* method = nullptr;
  std::optional<Error> refusal;
  CallContext context;
  // The largest message, compressed or not.
  size_t max_message_bytes = 1 << 20;
  bool request_gzip = false;   // request messages flagged compressed are gzip
  bool response_gzip = false;  // response messages are sent gzipped
};

class EnvelopeCall final : public StreamingCall {
 public:
  explicit EnvelopeCall(EnvelopeCallSetup setup) : setup_(std::move(setup)), reader_(setup_.max_message_bytes) {}

  void on_body(std::string_view data, bool end, StreamOutput& out) override;
  // A server stream sends what its source has now.
  void on_wake(StreamOutput& out) override;
  // A server stream ends with unavailable: clients reconnect to the next agent.
  void on_stop(StreamOutput& out) override;
  bool waiting() const override { return source_ != nullptr && !finished_; }

  bool finished() const { return finished_; }

 private:
  void handle_message(Envelope envelope, StreamOutput& out);
  void open_server_stream(const std::string& payload, StreamOutput& out);
  void poll_source(StreamOutput& out);
  void send_message(const google::protobuf::Message& message, StreamOutput& out);
  void finish(const Status& status, StreamOutput& out);
  void send_head(StreamOutput& out);

  EnvelopeCallSetup setup_;
  EnvelopeReader reader_;
  // A server stream's source, once its request message opened it.
  std::unique_ptr<ServerStream> source_;
  bool head_sent_ = false;
  bool finished_ = false;
};

}  // namespace kib::api
