#pragma once
// The deterministic serialization of a message (maps in key order): the form the
// command log fingerprints and "equal content" compares.
#include <google/protobuf/message.h>

#include <string>

namespace kib::api {

std::string deterministic_bytes(const google::protobuf::Message& m);
inline bool same_content(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return deterministic_bytes(a) == deterministic_bytes(b);
}

}  // namespace kib::api
