#include "agent/ctl/enum_name.h"

#include <cctype>

namespace kib::ctl {

std::string enum_prefix(const google::protobuf::EnumDescriptor* e) {
  std::string out;
  const std::string& n = e->name();
  for (size_t i = 0; i < n.size(); ++i) {
    const auto c = static_cast<unsigned char>(n[i]);
    if (i > 0 && std::isupper(c) && !std::isupper(static_cast<unsigned char>(n[i - 1]))) out += '_';
    out += static_cast<char>(std::toupper(c));
  }
  return out + "_";
}

std::string short_enum_name(const google::protobuf::EnumDescriptor* e, int number) {
  const auto* v = e->FindValueByNumber(number);
  if (v == nullptr) return std::to_string(number);
  const std::string prefix = enum_prefix(e);
  const std::string& n = v->name();
  return n.size() > prefix.size() && n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n;
}

const google::protobuf::EnumValueDescriptor* find_enum_value(const google::protobuf::EnumDescriptor* e,
                                                             const std::string& name) {
  std::string upper;
  for (unsigned char c : name) upper += static_cast<char>(std::toupper(c));
  if (const auto* v = e->FindValueByName(upper)) return v;
  return e->FindValueByName(enum_prefix(e) + upper);
}

}  // namespace kib::ctl
