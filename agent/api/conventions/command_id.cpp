#include "agent/api/conventions/command_id.h"

#include <google/protobuf/descriptor.h>
#include <openssl/sha.h>

#include <memory>

#include "agent/api/conventions/proto_bytes.h"

namespace kib::api {

Status validate_command_id(std::string_view id) {
  if (id.empty()) return Error{Code::invalid_argument, "command_id is required"};
  if (id.size() > kMaxCommandIdBytes)
    return Error{Code::invalid_argument, "command_id is longer than " + std::to_string(kMaxCommandIdBytes) + " bytes"};
  for (char c : id)
    if (c < 0x20 || c > 0x7e) return Error{Code::invalid_argument, "command_id must be printable ASCII"};
  return {};
}

std::string request_fingerprint(std::string_view method, const google::protobuf::Message& request) {
  std::unique_ptr<google::protobuf::Message> copy(request.New());
  copy->CopyFrom(request);
  const auto* field = copy->GetDescriptor()->FindFieldByName("command_id");
  if (field) copy->GetReflection()->ClearField(copy.get(), field);

  std::string bytes(method);
  bytes += '\0';
  bytes += deterministic_bytes(*copy);
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), md);
  return std::string(reinterpret_cast<char*>(md), sizeof md);
}

}  // namespace kib::api
