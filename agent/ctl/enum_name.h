#pragma once
// Short enum names, as tables and the agent's messages write them: a proto enum's
// values repeat the type's name as a prefix (NetworkMode: NETWORK_MODE_ISOLATED), and
// people write the rest (ISOLATED). Tables print the short name; message files accept
// both.
#include <string>

#include <google/protobuf/descriptor.h>

namespace kib::ctl {

// "NetworkMode" -> "NETWORK_MODE_".
std::string enum_prefix(const google::protobuf::EnumDescriptor* e);

// The value's name without its type's prefix: "ISOLATED"; the number when `number`
// names no value (an agent newer than kibotosctl).
std::string short_enum_name(const google::protobuf::EnumDescriptor* e, int number);

// The value `name` names, full ("NETWORK_MODE_ISOLATED") or short ("ISOLATED"), in
// any letter case; null when none.
const google::protobuf::EnumValueDescriptor* find_enum_value(const google::protobuf::EnumDescriptor* e,
                                                             const std::string& name);

}  // namespace kib::ctl
