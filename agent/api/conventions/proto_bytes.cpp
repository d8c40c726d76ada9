#include "agent/api/conventions/proto_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace kib::api {

std::string deterministic_bytes(const google::protobuf::Message& m) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    m.ByteSizeLong();  // SerializeWithCachedSizes needs the sizes cached
    m.SerializeWithCachedSizes(&coded);
  }
  return bytes;
}

}  // namespace kib::api
