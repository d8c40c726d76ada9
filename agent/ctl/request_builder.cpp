#include "agent/ctl/request_builder.h"

#include <charconv>
#include <limits>
#include <string_view>

#include "agent/ctl/message_file.h"

namespace kib::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

Error bad(const FlagSpec& f, const std::string& why) {
  return Error{Code::invalid_argument, "--" + std::string(f.name) + ": " + why};
}

// Walks all but the last component of `path`, creating sub-messages on the way.
struct Target {
  Message* msg;
  const FieldDescriptor* field;
};

Result<Target> resolve(Message& root, std::string_view path) {
  Message* msg = &root;
  for (;;) {
    const auto dot = path.find('.');
    const std::string name(path.substr(0, dot));
    const FieldDescriptor* fd = msg->GetDescriptor()->FindFieldByName(name);
    if (fd == nullptr) return Error{Code::internal, "no field " + name + " in " + msg->GetDescriptor()->full_name()};
    if (dot == std::string_view::npos) return Target{msg, fd};
    if (fd->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || fd->is_repeated())
      return Error{Code::internal, "field " + name + " is not a message"};
    msg = msg->GetReflection()->MutableMessage(msg, fd);
    path.remove_prefix(dot + 1);
  }
}

Status set_uint(const FlagSpec& f, const Target& t, const std::string& v) {
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) return bad(f, "expected a number, got '" + v + "'");
  const Reflection* r = t.msg->GetReflection();
  if (t.field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
    if (n > std::numeric_limits<uint32_t>::max()) return bad(f, "number too large");
    r->SetUInt32(t.msg, t.field, static_cast<uint32_t>(n));
  } else {
    r->SetUInt64(t.msg, t.field, n);
  }
  return {};
}

Status add_map_entry(const FlagSpec& f, const Target& t, const std::string& v) {
  const auto eq = v.find('=');
  if (eq == std::string::npos || eq == 0) return bad(f, "expected key=value, got '" + v + "'");
  const std::string key = v.substr(0, eq);
  const Reflection* r = t.msg->GetReflection();
  const auto* entry_type = t.field->message_type();
  const FieldDescriptor* kf = entry_type->FindFieldByNumber(1);
  const FieldDescriptor* vf = entry_type->FindFieldByNumber(2);
  for (int i = 0; i < r->FieldSize(*t.msg, t.field); ++i) {
    const Message& e = r->GetRepeatedMessage(*t.msg, t.field, i);
    if (e.GetReflection()->GetString(e, kf) == key) return bad(f, "key '" + key + "' given twice");
  }
  Message* e = r->AddMessage(t.msg, t.field);
  e->GetReflection()->SetString(e, kf, key);
  e->GetReflection()->SetString(e, vf, v.substr(eq + 1));
  return {};
}

Result<std::string> read_for(const FlagSpec& f, const std::string& path, const FileReader& read) {
  auto r = read(path);
  if (!r.ok()) return bad(f, r.error().message);
  return r;
}

}  // namespace

Status apply_flag(Message& req, const FlagSpec& f, const std::string& value, const FileReader& read) {
  if (f.bind == Bind::client) return {};  // kibotosctl's own (--all, --wait): nothing to send
  KIB_TRY_ASSIGN(auto t, resolve(req, f.field));
  const Reflection* r = t.msg->GetReflection();
  switch (f.bind) {
    case Bind::string:
      // `ip netns add vm1` names /run/netns/vm1: a bare name means that path.
      if (f.name == "netns" && !value.empty() && value.find('/') == std::string::npos) {
        r->SetString(t.msg, t.field, "/run/netns/" + value);
        return {};
      }
      r->SetString(t.msg, t.field, value);
      return {};
    case Bind::uint: return set_uint(f, t, value);
    case Bind::enable: r->SetBool(t.msg, t.field, true); return {};
    case Bind::presence: r->MutableMessage(t.msg, t.field); return {};
    case Bind::file:
    case Bind::secret_file: {
      KIB_TRY_ASSIGN(auto content, read_for(f, value, read));
      std::string s = std::move(content);
      // `echo secret > file` leaves a newline that is not part of the password.
      if (f.bind == Bind::secret_file && !s.empty() && s.back() == '\n') s.pop_back();
      if (f.bind == Bind::secret_file && !s.empty() && s.back() == '\r') s.pop_back();
      r->SetString(t.msg, t.field, std::move(s));
      return {};
    }
    case Bind::key_value: return add_map_entry(f, t, value);
    case Bind::message_file: {
      KIB_TRY_ASSIGN(auto content, read_for(f, value, read));
      return parse_message_text(content, value, *r->MutableMessage(t.msg, t.field));
    }
    case Bind::client: break;
  }
  return {};
}

Status build_request(const Invocation& inv, Message& req, const FileReader& read,
                     const std::function<std::string()>& new_command_id) {
  const CommandSpec& c = *inv.command;
  if (!c.positional.empty()) {
    FlagSpec id{c.positional_name, c.positional, Bind::string, true, ""};
    KIB_TRY(apply_flag(req, id, inv.positional, read));
  }
  for (const auto& [flag, value] : inv.values) KIB_TRY(apply_flag(req, *flag, value, read));
  if (c.write) {
    FlagSpec cid{"command-id", "command_id", Bind::string, true, ""};
    KIB_TRY(apply_flag(req, cid, inv.global.command_id.empty() ? new_command_id() : inv.global.command_id, read));
  }
  return {};
}

}  // namespace kib::ctl
