#include "agent/ctl/message_file.h"

#include <charconv>
#include <limits>
#include <map>
#include <set>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include "agent/ctl/enum_name.h"
#include "agent/ctl/json_text.h"

namespace kib::ctl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

constexpr int kMaxDepth = 64;

std::string kind_of(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    default: return "nothing";
  }
}

std::string field_list(const Descriptor* d) {
  std::string out;
  for (int i = 0; i < d->field_count(); ++i) out += (i ? ", " : "") + d->field(i)->json_name();
  return out;
}

// Whole numbers within the field's type; protobuf's JSON parser takes them bare or
// quoted (it prints 64-bit ones quoted).
bool whole_number_fits(const std::string& s, FieldDescriptor::CppType t) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (t == FieldDescriptor::CPPTYPE_UINT32 || t == FieldDescriptor::CPPTYPE_UINT64) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (s.empty() || ec != std::errc() || p != e) return false;
    return t == FieldDescriptor::CPPTYPE_UINT64 || v <= std::numeric_limits<uint32_t>::max();
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(b, e, v);
  if (s.empty() || ec != std::errc() || p != e) return false;
  return t == FieldDescriptor::CPPTYPE_INT64 ||
         (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max());
}

std::string number_kind(FieldDescriptor::CppType t) {
  switch (t) {
    case FieldDescriptor::CPPTYPE_UINT32: return "a whole number from 0 to 4294967295";
    case FieldDescriptor::CPPTYPE_UINT64: return "a whole number from 0";
    case FieldDescriptor::CPPTYPE_INT32: return "a 32-bit whole number";
    default: return "a whole number";
  }
}

// Checks a YAML tree against a message's descriptor and writes the JSON protobuf's
// parser reads, so that a mistake is reported where it is (file:line:column) in the
// words of the file; protobuf's own messages name neither. Along the way, short enum
// names become full ones and scalars are typed by their field, not by YAML's guess
// (`egressId: 123` is a string).
class Walker {
 public:
  explicit Walker(const std::string& origin) : origin_(origin) {}

  Status message(const YAML::Node& n, const Descriptor* d, const std::string& path, std::string& out, int depth) {
    if (depth > kMaxDepth) return at(n, path, "nested too deeply");
    if (n.IsNull()) {
      out += "null";
      return {};
    }
    if (d->file()->name().rfind("google/protobuf/", 0) == 0) {  // Timestamp etc.: protobuf's own syntax
      KIB_TRY_ASSIGN(auto json, node_to_json(n, false));
      out += json;
      return {};
    }
    if (!n.IsMap()) return at(n, path, "expected a mapping with the fields of " + d->name() + ", got " + kind_of(n));
    std::set<const FieldDescriptor*> seen;
    std::map<const google::protobuf::OneofDescriptor*, const FieldDescriptor*> chosen;
    out += '{';
    bool first = true;
    for (const auto& kv : n) {
      if (!kv.first.IsScalar())
        return at(kv.first, path, "a field name must be a plain word, not " + kind_of(kv.first));
      const std::string& key = kv.first.Scalar();
      const FieldDescriptor* f = find_field(d, key);
      if (f == nullptr)
        return at(kv.first, "",
                  "unknown field '" + key + "'" + (path.empty() ? "" : " in " + path) + "; valid: " + field_list(d));
      if (!seen.insert(f).second) return at(kv.first, path, "field '" + key + "' given twice");
      if (const auto* oneof = f->real_containing_oneof(); oneof && !kv.second.IsNull()) {
        if (const auto [it, fresh] = chosen.emplace(oneof, f); !fresh)
          return at(kv.first, path,
                    "'" + it->second->json_name() + "' and '" + f->json_name() + "' are both set; a " + d->name() +
                        " takes one of them");
      }
      out += first ? "" : ",";
      first = false;
      out += json_quote(f->json_name()) + ":";
      KIB_TRY(value(kv.second, f, join(path, f->json_name()), out, depth + 1));
    }
    out += '}';
    return {};
  }

 private:
  static std::string join(const std::string& path, const std::string& name) {
    return path.empty() ? name : path + "." + name;
  }

  static const FieldDescriptor* find_field(const Descriptor* d, const std::string& key) {
    for (int i = 0; i < d->field_count(); ++i)
      if (d->field(i)->json_name() == key || d->field(i)->name() == key) return d->field(i);
    return nullptr;
  }

  Error at(const YAML::Node& n, const std::string& path, const std::string& what) const {
    const YAML::Mark m = n.Mark();
    std::string where = origin_;
    // Appended piecewise: GCC 12's -Wrestrict false positive at -O2 (PR 105329).
    if (!m.is_null()) {
      where += ':';
      where += std::to_string(m.line + 1);
      where += ':';
      where += std::to_string(m.column + 1);
    }
    where += ": ";
    if (!path.empty()) {
      where += path;
      where += ": ";
    }
    where += what;
    return Error{Code::invalid_argument, where};
  }

  Status value(const YAML::Node& n, const FieldDescriptor* f, const std::string& path, std::string& out, int depth) {
    if (n.IsNull()) {
      out += "null";
      return {};
    }
    if (f->is_map()) {
      if (!n.IsMap()) return at(n, path, "expected a mapping of key: value, got " + kind_of(n));
      out += '{';
      bool first = true;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) return at(kv.first, path, "a key must be a plain word, not " + kind_of(kv.first));
        out += first ? "" : ",";
        first = false;
        out += json_quote(kv.first.Scalar()) + ":";
        KIB_TRY(single(kv.second, f->message_type()->map_value(), join(path, kv.first.Scalar()), out, depth));
      }
      out += '}';
      return {};
    }
    if (f->is_repeated()) {
      if (!n.IsSequence()) return at(n, path, "expected a list, got " + kind_of(n));
      out += '[';
      for (size_t i = 0; i < n.size(); ++i) {
        out += i ? "," : "";
        KIB_TRY(single(n[i], f, path + "[" + std::to_string(i) + "]", out, depth));
      }
      out += ']';
      return {};
    }
    return single(n, f, path, out, depth);
  }

  Status single(const YAML::Node& n, const FieldDescriptor* f, const std::string& path, std::string& out, int depth) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) return message(n, f->message_type(), path, out, depth);
    if (n.IsNull()) {
      out += "null";
      return {};
    }
    if (!n.IsScalar()) return at(n, path, "expected a single value, got " + kind_of(n));
    const std::string& s = n.Scalar();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING: out += json_quote(s); return {};
      case FieldDescriptor::CPPTYPE_BOOL:
        if (s != "true" && s != "false") return at(n, path, "expected true or false, got '" + s + "'");
        out += s;
        return {};
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        if (!whole_number_fits(s, f->cpp_type()))
          return at(n, path, "expected " + number_kind(f->cpp_type()) + ", got '" + s + "'");
        out += s;
        return {};
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* e = f->enum_type();
        if (whole_number_fits(s, FieldDescriptor::CPPTYPE_INT32)) {  // protobuf takes the number too
          out += s;
          return {};
        }
        if (const auto* v = find_enum_value(e, s)) {
          out += json_quote(v->name());
          return {};
        }
        std::string valid;
        for (int i = 0; i < e->value_count(); ++i) {
          if (e->value(i)->number() == 0) continue;  // UNSPECIFIED: accepted, never what is meant
          valid += (valid.empty() ? "" : ", ") + short_enum_name(e, e->value(i)->number());
        }
        return at(n, path, "'" + s + "' is not a " + e->name() + "; valid: " + valid);
      }
      default: out += json_quote(s); return {};  // float, double: protobuf's parser judges the text
    }
  }

  const std::string& origin_;
};

}  // namespace

Result<std::string> yaml_to_json(std::string_view yaml_text) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    return node_to_json(root, false);
  } catch (const YAML::Exception& e) {
    return Error{Code::invalid_argument, std::string("invalid YAML: ") + e.what()};
  }
}

Status parse_message_text(std::string_view text, const std::string& origin, google::protobuf::Message& out) {
  std::string json;
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) return Error{Code::invalid_argument, origin + ": empty document"};
    KIB_TRY(Walker(origin).message(root, out.GetDescriptor(), "", json, 0));
  } catch (const YAML::Exception& e) {
    // JSON that yaml-cpp refuses (YAML caps implicit keys at 1024 characters; JSON does
    // not) goes to protobuf's parser as it is: what kibotosctl prints, it reads back.
    // Found by tests/fuzz/ctl_message_file_fuzz.cpp.
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || text[first] != '{') {
      const std::string where =
          e.mark.is_null() ? origin
                           : origin + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
      return Error{Code::invalid_argument, where + ": invalid YAML: " + e.msg};
    }
    json = std::string(text);
  }
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // an operator's typo must not pass silently
  const auto st = google::protobuf::util::JsonStringToMessage(json, &out, opts);
  if (!st.ok())
    return Error{Code::invalid_argument,
                 origin + ": not a valid " + out.GetDescriptor()->name() + ": " + std::string(st.message())};
  return {};
}

}  // namespace kib::ctl
