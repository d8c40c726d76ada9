#pragma once
// Which of the four protocols a request speaks, from its Content-Type, as connect-go
// tells them apart: Connect unary (application/json, application/proto), Connect
// streaming (application/connect+…), gRPC (application/grpc[+…]) and gRPC-Web
// (application/grpc-web[+…]); a bare application/grpc[-web] is proto.
#include <optional>
#include <string>
#include <string_view>

#include "agent/api/connect/message_codec.h"

namespace kib::api {

enum class RpcProtocol { connect_unary, connect_stream, grpc, grpc_web };

struct RpcContentType {
  RpcProtocol protocol;
  Codec codec;
};

std::optional<RpcContentType> classify_content_type(std::string_view content_type);
// The Content-Type of a response in that protocol and codec.
std::string response_content_type(RpcContentType type);

}  // namespace kib::api
