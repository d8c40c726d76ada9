#include "agent/ctl/json_text.h"

#include <cstdio>

#include "agent/ctl/yaml_scalar.h"

namespace kib::ctl {
namespace {

constexpr int kMaxDepth = 64;

bool is_json_literal(const std::string& s) { return s == "true" || s == "false" || s == "null" || is_json_number(s); }

void newline(std::string& out, bool pretty, int depth) {
  if (!pretty) return;
  out += '\n';
  out.append(2 * static_cast<size_t>(depth), ' ');
}

Status append_node(std::string& out, const YAML::Node& n, int depth, bool pretty) {
  if (depth > kMaxDepth) return Error{Code::invalid_argument, "nested too deeply"};
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: out += "null"; return {};
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() != "!" && is_json_literal(s)) {
        out += s;
      } else if (n.Tag() != "!" && s == "~") {
        out += "null";
      } else {
        out += json_quote(s);
      }
      return {};
    }
    case YAML::NodeType::Sequence: {
      out += '[';
      bool first = true;
      for (const auto& item : n) {
        if (!first) out += ',';
        first = false;
        newline(out, pretty, depth + 1);
        KIB_TRY(append_node(out, item, depth + 1, pretty));
      }
      if (!first) newline(out, pretty, depth);
      out += ']';
      return {};
    }
    case YAML::NodeType::Map: {
      out += '{';
      bool first = true;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) return Error{Code::invalid_argument, "mapping keys must be strings"};
        if (!first) out += ',';
        first = false;
        newline(out, pretty, depth + 1);
        out += json_quote(kv.first.Scalar());
        out += pretty ? ": " : ":";
        KIB_TRY(append_node(out, kv.second, depth + 1, pretty));
      }
      if (!first) newline(out, pretty, depth);
      out += '}';
      return {};
    }
  }
  return {};
}

}  // namespace

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + '"';
}

Result<std::string> node_to_json(const YAML::Node& n, bool pretty) {
  std::string out;
  KIB_TRY(append_node(out, n, 0, pretty));
  return out;
}

}  // namespace kib::ctl
