#include "agent/ctl/output_format.h"

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <yaml-cpp/yaml.h>

#include "agent/ctl/enum_name.h"
#include "agent/ctl/json_text.h"
#include "agent/ctl/output_id.h"
#include "agent/ctl/yaml_scalar.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::ctl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
namespace v1 = kibotos::ctrl::v1;

// ---- table ----

struct Column {
  std::string_view header;
  std::function<std::string(const Message&)> cell;
};

template <typename T>
Column col(std::string_view header, std::function<std::string(const T&)> f) {
  return {header, [f](const Message& m) { return f(dynamic_cast<const T&>(m)); }};
}

std::string labels_text(const google::protobuf::Map<std::string, std::string>& m) {
  const std::map<std::string, std::string> sorted(m.begin(), m.end());
  std::string out;
  for (const auto& [k, v] : sorted) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string duration_text(const google::protobuf::Duration& d) {
  int64_t s = d.seconds();
  const int64_t days = s / 86400, hours = s % 86400 / 3600, mins = s % 3600 / 60;
  s %= 60;
  std::string out;
  if (days) out += std::to_string(days) + "d";
  if (days || hours) out += std::to_string(hours) + "h";
  if (days || hours || mins) out += std::to_string(mins) + "m";
  return out + std::to_string(s) + "s";
}

std::string mode_text(v1::NetworkMode m) { return short_enum_name(v1::NetworkMode_descriptor(), m); }

// Below a second in ms ("350ms"), else as durations are ("1m2s").
std::string age_text(uint64_t ms) {
  if (ms < 1000) return std::to_string(ms) + "ms";
  google::protobuf::Duration d;
  d.set_seconds(static_cast<int64_t>(ms / 1000));
  return duration_text(d);
}

// The newest failure with its time (UTC) and how many came since the last success.
std::string error_text(const v1::EgressStatus& s) {
  if (s.last_error().empty()) return "";
  return google::protobuf::util::TimeUtil::ToString(s.last_error_time()) + " " + s.last_error() + " (" +
         std::to_string(s.consecutive_failures()) + " since the last success)";
}

const std::vector<Column>* view_for(const Descriptor* d) {
  using std::to_string;
  static const std::map<const Descriptor*, std::vector<Column>> views = {
      {v1::Agent::descriptor(),
       {col<v1::Agent>("VERSION", [](const auto& a) { return a.version(); }),
        col<v1::Agent>("UPTIME", [](const auto& a) { return duration_text(a.uptime()); }),
        col<v1::Agent>("WORKSPACES", [](const auto& a) { return to_string(a.workspace_count()); }),
        col<v1::Agent>("EGRESSES", [](const auto& a) { return to_string(a.egress_count()); }),
        col<v1::Agent>("CONNECTIONS", [](const auto& a) { return to_string(a.active_connections()); }),
        col<v1::Agent>("DRAINING", [](const auto& a) { return to_string(a.draining_connections()); }),
        col<v1::Agent>("FEATURES", [](const auto& a) {
          std::string out;
          for (const auto& f : a.features()) out += (out.empty() ? "" : ",") + f;
          return out;
        })}},
      {v1::Egress::descriptor(),
       {col<v1::Egress>("EGRESS ID", [](const auto& e) { return e.egress_id(); }),
        col<v1::Egress>("ADDRESS", [](const auto& e) { return e.spec().socks5().address(); }),
        col<v1::Egress>("AUTH", [](const auto& e) { return yes_no(!e.spec().socks5().username().empty()); }),
        col<v1::Egress>("TLS", [](const auto& e) { return yes_no(e.spec().socks5().has_tls()); }),
        col<v1::Egress>("UDP", [](const auto& e) { return yes_no(e.spec().udp_enabled()); }),
        col<v1::Egress>("REVISION", [](const auto& e) { return to_string(e.revision()); }),
        col<v1::Egress>("LABELS", [](const auto& e) { return labels_text(e.labels()); })}},
      {v1::Workspace::descriptor(),
       {col<v1::Workspace>("WORKSPACE ID", [](const auto& w) { return w.workspace_id(); }),
        col<v1::Workspace>("NETNS", [](const auto& w) { return w.netns(); }),
        col<v1::Workspace>("MODE", [](const auto& w) { return mode_text(w.network_policy().mode()); }),
        col<v1::Workspace>("POLICY REV", [](const auto& w) { return to_string(w.network_policy().revision()); }),
        col<v1::Workspace>("APPLIED POLICY REV",
                           [](const auto& w) { return to_string(w.network_policy_status().applied_revision()); }),
        col<v1::Workspace>("STATUS",
                           [](const auto& w) {
                             const auto& e = w.network_policy_status().error();
                             return e.empty() ? std::string("ok") : e;
                           }),
        col<v1::Workspace>("LABELS", [](const auto& w) { return labels_text(w.labels()); })}},
      {v1::EgressStatus::descriptor(),
       {col<v1::EgressStatus>("EGRESS ID", [](const auto& s) { return s.egress_id(); }),
        col<v1::EgressStatus>("EGRESS REV", [](const auto& s) { return to_string(s.applied_revision()); }),
        col<v1::EgressStatus>("ACTIVE", [](const auto& s) { return to_string(s.active_connections()); }),
        col<v1::EgressStatus>("DRAINING", [](const auto& s) { return to_string(s.draining_connections()); }),
        col<v1::EgressStatus>("HEALTH", [](const auto& s) { return s.health().state(); }),
        col<v1::EgressStatus>("OPENED", [](const auto& s) { return to_string(s.connections().opened()); }),
        col<v1::EgressStatus>("FROM GUEST", [](const auto& s) { return to_string(s.connections().bytes_from_guest()); }),
        col<v1::EgressStatus>("TO GUEST", [](const auto& s) { return to_string(s.connections().bytes_to_guest()); }),
        col<v1::EgressStatus>("LAST ERROR", [](const auto& s) { return error_text(s); })}},
      {v1::Connection::descriptor(),
       {col<v1::Connection>("ID", [](const auto& c) { return to_string(c.connection_id()); }),
        col<v1::Connection>("STATE",
                            [](const auto& c) {
                              return short_enum_name(v1::ConnectionState_descriptor(), c.state());
                            }),
        col<v1::Connection>("AGE", [](const auto& c) { return age_text(c.age_ms()); }),
        col<v1::Connection>("GUEST", [](const auto& c) { return c.guest_address(); }),
        col<v1::Connection>("DESTINATION", [](const auto& c) { return c.original_destination(); }),
        col<v1::Connection>("EGRESS ID", [](const auto& c) { return c.egress_id(); }),
        col<v1::Connection>("EGRESS REV", [](const auto& c) { return to_string(c.egress_revision()); }),
        col<v1::Connection>("FROM GUEST", [](const auto& c) { return to_string(c.bytes_from_guest()); }),
        col<v1::Connection>("TO GUEST", [](const auto& c) { return to_string(c.bytes_to_guest()); })}},
      {v1::DnsResolverStatus::descriptor(),
       {col<v1::DnsResolverStatus>("RESOLVER", [](const auto& s) { return s.address(); }),
        col<v1::DnsResolverStatus>("TRANSPORT", [](const auto& s) { return s.transport(); }),
        col<v1::DnsResolverStatus>("EGRESS ID", [](const auto& s) { return s.egress_id(); }),
        col<v1::DnsResolverStatus>("STATE", [](const auto& s) { return s.state(); }),
        col<v1::DnsResolverStatus>("RELAY", [](const auto& s) { return s.relay_address(); }),
        col<v1::DnsResolverStatus>("EGRESS REV", [](const auto& s) { return to_string(s.egress_revision()); }),
        col<v1::DnsResolverStatus>("LAST ERROR", [](const auto& s) { return s.last_error(); })}},
  };
  const auto it = views.find(d);
  return it == views.end() ? nullptr : &it->second;
}

std::string render_rows(const std::vector<Column>& cols, const std::vector<const Message*>& rows) {
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width;
  for (const auto& c : cols) width.push_back(c.header.size());
  for (const Message* m : rows) {
    auto& r = cells.emplace_back();
    for (size_t i = 0; i < cols.size(); ++i) {
      std::string v = cols[i].cell(*m);
      if (v.empty()) v.push_back('-');  // not `v = "-"`: GCC 12 -Wrestrict false positive (PR 105329) at -O3
      width[i] = std::max(width[i], v.size());
      r.push_back(std::move(v));
    }
  }
  auto line = [&](const std::function<std::string(size_t)>& text) {
    std::string out;
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string t = text(i);
      out += t;
      if (i + 1 < cols.size()) out += std::string(width[i] - t.size() + 3, ' ');
    }
    return out + "\n";
  };
  std::string out = line([&](size_t i) { return std::string(cols[i].header); });
  for (const auto& r : cells) out += line([&](size_t i) { return r[i]; });
  return out;
}

std::string scalar_text(const Message& m, const FieldDescriptor* f) {
  const auto* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING: return r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_BOOL: return yes_no(r->GetBool(m, f));
    case FieldDescriptor::CPPTYPE_UINT32: return std::to_string(r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64: return std::to_string(r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_INT32: return std::to_string(r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64: return std::to_string(r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_ENUM: return r->GetEnum(m, f)->name();
    default: return "";
  }
}

// A map field on one line, keys sorted: "name: k1=v1,k2=v2".
std::string map_line(const Message& m, const FieldDescriptor* f) {
  const auto* r = m.GetReflection();
  std::map<std::string, std::string> sorted;
  for (int j = 0; j < r->FieldSize(m, f); ++j) {
    const Message& entry = r->GetRepeatedMessage(m, f, j);
    const auto* ed = entry.GetDescriptor();
    sorted[scalar_text(entry, ed->map_key())] = scalar_text(entry, ed->map_value());
  }
  std::string out;
  for (const auto& [k, v] : sorted) out += (out.empty() ? "" : ",") + k + "=" + v;
  return f->name() + ": " + out + "\n";
}

// Each "name: value" line of text as "prefixNAME: value" (a nested message's fields).
std::string prefixed(const std::string& prefix, const std::string& text) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string line = text.substr(at, end - at);
    out += (line.find(": ") != std::string::npos ? prefix : "") + line;
    at = end;
  }
  return out;
}

// A message without a view of its own: its set scalars as "name: value" lines, maps
// as one line each, and its messages that have views as tables, in field order.
std::string render_fields(const Message& m) {
  std::string out;
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      if (r->FieldSize(m, f) > 0) out += map_line(m, f);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      const auto* view = view_for(f->message_type());
      std::vector<const Message*> rows;
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(m, f); ++j) rows.push_back(&r->GetRepeatedMessage(m, f, j));
      } else if (r->HasField(m, f)) {
        if (!view) {
          out += prefixed(f->name() + ".", render_fields(r->GetMessage(m, f)));
          continue;
        }
        rows.push_back(&r->GetMessage(m, f));
      }
      if (view && (f->is_repeated() || !rows.empty())) out += render_rows(*view, rows);
    } else if (!f->is_repeated() && r->HasField(m, f)) {
      // Beside the Egresses' own applied revisions, say whose this one is.
      const bool policy_rev = f == v1::NetworkPolicyStatus::descriptor()->FindFieldByName("applied_revision");
      out += (policy_rev ? "applied_policy_revision" : f->name()) + ": " + scalar_text(m, f) + "\n";
    }
  }
  return out;
}

// ---- yaml ----

void emit(YAML::Emitter& out, const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      out << YAML::BeginMap;
      for (const auto& kv : n) {
        out << YAML::Key << kv.first.Scalar() << YAML::Value;
        emit(out, kv.second);
      }
      out << YAML::EndMap;
      return;
    case YAML::NodeType::Sequence:
      if (n.size() == 0) out << YAML::Flow;  // "key: []" on one line
      out << YAML::BeginSeq;
      for (const auto& item : n) emit(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      const bool was_string = n.Tag() == "!";
      if (was_string && s.find('\n') != std::string::npos) {
        out << YAML::Literal << s;
      } else if (was_string && reads_as_non_string(s)) {  // quoted to stay a string
        out << YAML::DoubleQuoted << s;
      } else {
        out << s;
      }
      return;
    }
    default: out << YAML::Null;
  }
}

// Well-known types print as JSON scalars (a Timestamp as a string), not as objects.
bool is_well_known(const Descriptor* d) { return d->file()->name().rfind("google/protobuf/", 0) == 0; }

// `n` (a message `d` as proto3 JSON) with each empty list present as [] and members in
// field order: a script reads `.egresses[]` the same with none as with some. Proto3
// JSON leaves empty lists out.
YAML::Node with_empty_lists(const YAML::Node& n, const Descriptor* d) {
  if (!n.IsMap() || is_well_known(d)) return n;
  YAML::Node out(YAML::NodeType::Map);
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const YAML::Node v = n[f->json_name()];
    const bool nested = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map();
    if (!v.IsDefined()) {
      if (f->is_repeated() && !f->is_map()) out[f->json_name()] = YAML::Node(YAML::NodeType::Sequence);
    } else if (nested && f->is_repeated() && v.IsSequence()) {
      YAML::Node items(YAML::NodeType::Sequence);
      for (const auto& item : v) items.push_back(with_empty_lists(item, f->message_type()));
      out[f->json_name()] = items;
    } else if (nested) {
      out[f->json_name()] = with_empty_lists(v, f->message_type());
    } else {
      out[f->json_name()] = v;
    }
  }
  return out;
}

// The tree both -o json and -o yaml print.
Result<YAML::Node> output_tree(const Message& msg) {
  std::string json;
  const auto st = google::protobuf::util::MessageToJsonString(msg, &json);
  if (!st.ok()) return Error{Code::internal, "cannot print JSON: " + std::string(st.message())};
  try {
    return with_empty_lists(YAML::Load(json), msg.GetDescriptor());
  } catch (const YAML::Exception& e) {
    return Error{Code::internal, std::string("cannot read back the printed JSON: ") + e.what()};
  }
}

}  // namespace

const Message* select_output(const Message& response, std::string_view path) {
  const Message* m = &response;
  while (!path.empty()) {
    const auto dot = path.find('.');
    const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(std::string(path.substr(0, dot)));
    if (f == nullptr || f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
    if (!m->GetReflection()->HasField(*m, f)) return nullptr;
    m = &m->GetReflection()->GetMessage(*m, f);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return m;
}

Result<std::string> to_json(const Message& msg) {
  KIB_TRY_ASSIGN(auto tree, output_tree(msg));
  KIB_TRY_ASSIGN(auto out, node_to_json(tree, true));
  return out + "\n";
}

Result<std::string> to_yaml(const Message& msg) {
  KIB_TRY_ASSIGN(auto tree, output_tree(msg));
  try {
    YAML::Emitter out;
    emit(out, tree);
    return std::string(out.c_str()) + "\n";
  } catch (const YAML::Exception& e) {
    return Error{Code::internal, std::string("cannot print YAML: ") + e.what()};
  }
}

std::string to_table(const Message& msg) {
  if (const auto* view = view_for(msg.GetDescriptor())) return render_rows(*view, {&msg});
  return render_fields(msg);
}

Result<std::string> format_output(const Message& msg, OutputFormat format) {
  switch (format) {
    case OutputFormat::json: return to_json(msg);
    case OutputFormat::yaml: return to_yaml(msg);
    case OutputFormat::table: return to_table(msg);
    case OutputFormat::id: return id_lines(msg);
  }
  return to_table(msg);
}

}  // namespace kib::ctl
