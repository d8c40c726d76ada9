#include "agent/api/reflection/server_reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

#include "grpc/reflection/v1alpha/reflection.pb.h"

namespace kib::api {
namespace {

namespace pb = google::protobuf;
namespace v1 = grpc::reflection::v1;

constexpr const char* kV1 = "grpc.reflection.v1.ServerReflection";
constexpr const char* kV1alpha = "grpc.reflection.v1alpha.ServerReflection";

const pb::DescriptorPool& pool() { return *pb::DescriptorPool::generated_pool(); }

// The file first, then every file it imports, transitively, each once: what a client
// needs to build the file's descriptors.
void add_with_imports(const pb::FileDescriptor* file, std::set<std::string>& seen, v1::FileDescriptorResponse& out) {
  if (!seen.insert(file->name()).second) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out.add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) add_with_imports(file->dependency(i), seen, out);
}

void set_error(v1::ServerReflectionResponse& r, Code code, std::string message) {
  r.mutable_error_response()->set_error_code(static_cast<int32_t>(code));
  r.mutable_error_response()->set_error_message(std::move(message));
}

void answer_file(const pb::FileDescriptor* file, const std::string& what, v1::ServerReflectionResponse& r) {
  if (file == nullptr) return set_error(r, Code::not_found, what + " not found");
  std::set<std::string> seen;
  add_with_imports(file, seen, *r.mutable_file_descriptor_response());
}

}  // namespace

v1::ServerReflectionResponse ServerReflection::answer(const v1::ServerReflectionRequest& req) const {
  v1::ServerReflectionResponse r;
  r.set_valid_host(req.host());
  *r.mutable_original_request() = req;
  switch (req.message_request_case()) {
    case v1::ServerReflectionRequest::kListServices:
      for (const auto& name : services_) r.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case v1::ServerReflectionRequest::kFileByFilename:
      answer_file(pool().FindFileByName(req.file_by_filename()), "file " + req.file_by_filename(), r);
      break;
    case v1::ServerReflectionRequest::kFileContainingSymbol:
      answer_file(pool().FindFileContainingSymbol(req.file_containing_symbol()),
                  "symbol " + req.file_containing_symbol(), r);
      break;
    case v1::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = req.file_containing_extension();
      const pb::Descriptor* type = pool().FindMessageTypeByName(ext.containing_type());
      const pb::FieldDescriptor* field =
          type == nullptr ? nullptr : pool().FindExtensionByNumber(type, ext.extension_number());
      answer_file(field == nullptr ? nullptr : field->file(),
                  "extension " + std::to_string(ext.extension_number()) + " of " + ext.containing_type(), r);
      break;
    }
    case v1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const pb::Descriptor* type = pool().FindMessageTypeByName(req.all_extension_numbers_of_type());
      if (type == nullptr) {
        set_error(r, Code::not_found, "type " + req.all_extension_numbers_of_type() + " not found");
        break;
      }
      std::vector<const pb::FieldDescriptor*> extensions;
      pool().FindAllExtensions(type, &extensions);
      auto* numbers = r.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* f : extensions) numbers->add_extension_number(f->number());
      break;
    }
    case v1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      set_error(r, Code::invalid_argument, "the request asks nothing (message_request not set)");
      break;
  }
  return r;
}

void ServerReflection::register_methods(MethodRegistry& registry) {
  // v1alpha is served with v1's messages; calling into one of its own keeps its
  // generated file linked, so its descriptors are in the pool that list_services points
  // to. (Naming default_instance() alone is optimised away at -O1 and the file dropped.)
  (void)grpc::reflection::v1alpha::ServerReflectionRequest::descriptor();
  services_.push_back(kV1);
  services_.push_back(kV1alpha);
  for (const char* service : {kV1, kV1alpha})
    registry.add_stream<v1::ServerReflectionRequest, v1::ServerReflectionResponse>(
        std::string(service) + "/ServerReflectionInfo",
        [this](const v1::ServerReflectionRequest& req, const CallContext&) -> Result<v1::ServerReflectionResponse> {
          return answer(req);
        });
}

}  // namespace kib::api
