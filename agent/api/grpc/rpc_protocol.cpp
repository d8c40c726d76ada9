#include "agent/api/grpc/rpc_protocol.h"

#include <algorithm>
#include <cctype>

namespace kib::api {
namespace {

// "application/grpc+json" with prefix "application/grpc": the codec after '+', proto
// when there is none; nullopt for another suffix.
std::optional<Codec> suffix_codec(std::string_view type, std::string_view prefix) {
  std::string_view rest = type.substr(prefix.size());
  if (rest.empty() || rest == "+proto") return Codec::proto;
  if (rest == "+json") return Codec::json;
  return std::nullopt;
}

}  // namespace

std::optional<RpcContentType> classify_content_type(std::string_view content_type) {
  std::string_view bare = content_type.substr(0, content_type.find(';'));
  while (!bare.empty() && (bare.back() == ' ' || bare.back() == '\t')) bare.remove_suffix(1);
  std::string type(bare);
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
  if (auto codec = codec_for_content_type(type)) return RpcContentType{RpcProtocol::connect_unary, *codec};
  static constexpr std::string_view kConnect = "application/connect", kGrpcWeb = "application/grpc-web",
                                    kGrpc = "application/grpc";
  std::optional<Codec> codec;
  // Longest prefix first: "application/grpc-web" also starts with "application/grpc".
  if (type.starts_with(kGrpcWeb)) {
    if ((codec = suffix_codec(type, kGrpcWeb))) return RpcContentType{RpcProtocol::grpc_web, *codec};
  } else if (type.starts_with(kGrpc)) {
    if ((codec = suffix_codec(type, kGrpc))) return RpcContentType{RpcProtocol::grpc, *codec};
  } else if (type.starts_with(kConnect) && type.size() > kConnect.size()) {
    if ((codec = suffix_codec(type, kConnect))) return RpcContentType{RpcProtocol::connect_stream, *codec};
  }
  return std::nullopt;
}

std::string response_content_type(RpcContentType type) {
  const char* codec = type.codec == Codec::json ? "json" : "proto";
  switch (type.protocol) {
    case RpcProtocol::connect_unary: return std::string(content_type_of(type.codec));
    case RpcProtocol::connect_stream: return std::string("application/connect+") + codec;
    case RpcProtocol::grpc: return std::string("application/grpc+") + codec;
    case RpcProtocol::grpc_web: return std::string("application/grpc-web+") + codec;
  }
  return "application/octet-stream";
}

}  // namespace kib::api
