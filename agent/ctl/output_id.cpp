#include "agent/ctl/output_id.h"

namespace kib::ctl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The resource's own ID field: field 1, singular, string or integer, named "*_id".
const FieldDescriptor* own_id(const Descriptor* d) {
  const FieldDescriptor* f = d->FindFieldByNumber(1);
  if (f == nullptr || f->is_repeated() || !ends_with(f->name(), "_id")) return nullptr;
  const auto t = f->cpp_type();
  return t == FieldDescriptor::CPPTYPE_STRING || t == FieldDescriptor::CPPTYPE_UINT64 ? f : nullptr;
}

// The field holding the resource(s) of a response: field 1, a message with an ID.
const FieldDescriptor* wrapped(const Descriptor* d) {
  const FieldDescriptor* f = d->FindFieldByNumber(1);
  if (f == nullptr || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) return nullptr;
  return own_id(f->message_type()) ? f : nullptr;
}

// The type `path` (a command's output_field) selects in `d`; null when none.
const Descriptor* select_type(const Descriptor* d, std::string_view path) {
  while (d != nullptr && !path.empty()) {
    const auto dot = path.find('.');
    const FieldDescriptor* f = d->FindFieldByName(std::string(path.substr(0, dot)));
    d = f && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ? f->message_type() : nullptr;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return d;
}

std::string id_text(const Message& m, const FieldDescriptor* f) {
  const auto* r = m.GetReflection();
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) return std::to_string(r->GetUInt64(m, f));
  return r->GetString(m, f);
}

}  // namespace

Status check_id_output(const CommandSpec& c, const Descriptor* response) {
  if (c.verb == "delete") return {};  // the answer is empty: the deleted ID is the positional
  const Descriptor* d = select_type(response, c.output_field);
  if (d != nullptr && (own_id(d) || wrapped(d))) return {};
  // Appended piecewise: GCC 12's -Wrestrict false positive at -O2 (PR 105329).
  std::string msg = "-o id: '";
  msg += c.group;
  if (!c.verb.empty()) {
    msg += ' ';
    msg += c.verb;
  }
  msg += "' shows no ID; use -o table, json or yaml";
  return Error{Code::invalid_argument, msg};
}

std::string id_lines(const Message& shown) {
  const Descriptor* d = shown.GetDescriptor();
  if (const FieldDescriptor* f = own_id(d)) return id_text(shown, f) + "\n";
  const FieldDescriptor* f = wrapped(d);
  if (f == nullptr) return "";
  const auto* r = shown.GetReflection();
  const FieldDescriptor* id = own_id(f->message_type());
  std::string out;
  if (!f->is_repeated()) {
    if (r->HasField(shown, f)) out = id_text(r->GetMessage(shown, f), id) + "\n";
    return out;
  }
  for (int i = 0; i < r->FieldSize(shown, f); ++i) out += id_text(r->GetRepeatedMessage(shown, f, i), id) + "\n";
  return out;
}

}  // namespace kib::ctl
