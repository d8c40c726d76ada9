#pragma once
// gRPC server reflection (grpc.reflection.v1 and v1alpha, ServerReflectionInfo)
// answered from the descriptors compiled into the binary: protobuf's generated pool
// and FileDescriptorProto serialization. The two versions are the same messages under
// two package names (wire- and JSON-identical), so both are served with v1's types.
#include <string>
#include <vector>

#include "agent/api/connect/method_registry.h"
#include "grpc/reflection/v1/reflection.pb.h"

namespace kib::api {

class ServerReflection {
 public:
  // services: the full names list_services answers (the reflection service's own
  // names included by register_methods).
  explicit ServerReflection(std::vector<std::string> services) : services_(std::move(services)) {}

  // One answer per request; what is not found is an error_response, not an error.
  grpc::reflection::v1::ServerReflectionResponse answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

  // Registers ServerReflectionInfo under both versions and adds their names to the list.
  // This object must outlive the registry's use.
  void register_methods(MethodRegistry& registry);

 private:
  std::vector<std::string> services_;
};

}  // namespace kib::api
