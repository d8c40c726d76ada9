// YAML -> kib::Config. Every key is optional; unknown keys and bad values are errors
// naming the dotted key, so an operator's typo stops the start instead of passing.
#include "agent/config/config.h"

#include <sys/un.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "agent/config/config_scalars.h"

namespace kib {
namespace {

using YAML::Node;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;

Error key_error(const std::string& key, const std::string& message) {
  return Error{Code::invalid_argument, key + ": " + message};
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// A present child section, or nullptr-like (IsDefined false / null) when absent.
bool present(const Node& n) { return n.IsDefined() && !n.IsNull(); }

Result<std::string> scalar(const Node& n, const std::string& key) {
  if (!n.IsScalar()) return key_error(key, "expected a single value");
  return n.Scalar();
}

// ---- value kinds: how a key's text becomes its member, and the member text again ----

// The show() of the kinds whose member is the text itself.
struct Text {
  std::string show(const std::string& v) const { return v; }
};

struct AbsolutePath : Text {
  Status parse(const std::string& s, std::string& out) const {
    if (s.empty() || s.front() != '/') return Error{Code::invalid_argument, "expected an absolute path"};
    out = s;
    return {};
  }
};

struct AccessLogTarget : Text {
  Status parse(const std::string& s, std::string& out) const {
    if (s == "journal") {
      out = s;
      return {};
    }
    if (s.empty() || s.front() != '/') return Error{Code::invalid_argument, "expected an absolute path or \"journal\""};
    out = s;
    return {};
  }
};

struct UnixSocketPath : Text {
  Status parse(const std::string& s, std::string& out) const {
    KIB_TRY(AbsolutePath{}.parse(s, out));
    if (s.size() >= sizeof(sockaddr_un::sun_path))
      return Error{Code::invalid_argument, "path too long for a Unix socket (max 107 bytes)"};
    return {};
  }
};

struct AnyString : Text {
  Status parse(const std::string& s, std::string& out) const {
    out = s;
    return {};
  }
};

struct HostPort : Text {
  Status parse(const std::string& s, std::string& out) const {
    KIB_TRY(config::check_host_port(s));
    out = s;
    return {};
  }
};

struct OctalMode {
  Status parse(const std::string& s, uint32_t& out) const {
    KIB_TRY_ASSIGN(out, config::parse_octal_mode(s));
    return {};
  }
  std::string show(uint32_t v) const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04o", v);
    return buf;
  }
};

struct UintIn {
  uint64_t min, max;
  template <typename T>
  Status parse(const std::string& s, T& out) const {
    KIB_TRY_ASSIGN(auto v, config::parse_uint(s, min, max));
    out = static_cast<T>(v);
    return {};
  }
  template <typename T>
  std::string show(T v) const {
    return std::to_string(v);
  }
};

struct Bool {
  Status parse(const std::string& s, bool& out) const {
    if (s != "true" && s != "false") return Error{Code::invalid_argument, "must be true or false"};
    out = s == "true";
    return {};
  }
  std::string show(bool v) const { return v ? "true" : "false"; }
};

// A positive duration in whole seconds.
struct Seconds {
  Status parse(const std::string& s, seconds& out) const {
    KIB_TRY_ASSIGN(auto d, config::parse_duration(s));
    if (d.count() <= 0 || d.count() % 1000 != 0)
      return Error{Code::invalid_argument, "expected a positive duration in whole seconds"};
    out = duration_cast<seconds>(d);
    return {};
  }
  std::string show(seconds v) const { return std::to_string(v.count()) + "s"; }
};

// A positive duration, at most `max` when set (e.g. a wait that holds a query slot).
struct Millis {
  milliseconds max = milliseconds::max();
  const char* max_text = nullptr;
  Status parse(const std::string& s, milliseconds& out) const {
    KIB_TRY_ASSIGN(auto d, config::parse_duration(s));
    if (d.count() <= 0) return Error{Code::invalid_argument, "expected a positive duration"};
    if (d > max) return Error{Code::invalid_argument, std::string("expected at most ") + max_text};
    out = d;
    return {};
  }
  std::string show(milliseconds v) const { return std::to_string(v.count()) + "ms"; }
};

struct OneOf {
  std::vector<std::string_view> allowed;
  Status parse(const std::string& s, std::string& out) const {
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) {
      out = s;
      return {};
    }
    std::string list;
    for (auto a : allowed) {
      // Appended piecewise: `"|" + std::string(a)` trips GCC 12's -Wrestrict false
      // positive at -O3 (GCC PR 105329, 105651).
      if (!list.empty()) list += '|';
      list += a;
    }
    return Error{Code::invalid_argument, "expected one of " + list};
  }
  std::string show(const std::string& v) const { return v; }
};

// A kernel congestion control algorithm name (TCP_CA_NAME_MAX is 16 with the NUL);
// whether this kernel has it is checked when the data plane starts.
struct CongestionControl : Text {
  Status parse(const std::string& s, std::string& out) const {
    const bool ok = s.size() < 16 && std::all_of(s.begin(), s.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                    });
    if (!ok) return Error{Code::invalid_argument, "must be a congestion control name such as cubic, or empty"};
    out = s;
    return {};
  }
};

// A YAML sequence of strings, each checked by `check`; errors name "key[i]".
struct StringList {
  Status (*check)(const std::string&);
  Status parse_node(const Node& n, const std::string& key, std::vector<std::string>& out) const {
    if (!n.IsDefined() || n.IsNull()) return {};
    if (!n.IsSequence()) return key_error(key, "expected a list");
    std::vector<std::string> items;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string item_key = key + "[" + std::to_string(i) + "]";
      KIB_TRY_ASSIGN(auto s, scalar(n[i], item_key));
      Status st = check(s);
      if (!st.ok()) return key_error(item_key, st.error().message);
      items.push_back(s);
    }
    out = std::move(items);
    return {};
  }
  std::string show(const std::vector<std::string>& v) const {
    std::string out = "[";
    for (const auto& s : v) out += (out.size() > 1 ? ", " : "") + s;
    return out + "]";
  }
};

// The full CIDR syntax is checked by check_config_cidrs (agent/daemon), which links
// the policy library; that library is built after this one.
Status check_cidr(const std::string& s) {
  if (s.empty() || s.find_first_of(" \t") != std::string::npos)
    return Error{Code::invalid_argument, "expected a CIDR like 10.0.0.0/8"};
  return {};
}

Status check_resolver(const std::string& s) { return config::check_ip_maybe_port(s); }

// ---- the table ----

// One configuration key: its dotted name, the member it sets and its kind. The member
// is a path of member pointers from Config; its initializer in config.h is the default.
struct Key {
  std::string name;
  std::function<Status(const Node& value, Config& c)> parse;  // value: the key's node
  std::function<std::string(const Config& c)> show;
};

template <auto... Path, typename K>
Key key(std::string name, K kind) {
  auto member = [](auto& c) -> auto& { return (c.*....*Path); };
  Key k;
  k.name = name;
  k.show = [kind, member](const Config& c) { return kind.show(member(c)); };
  if constexpr (requires { &K::parse_node; }) {
    k.parse = [kind, member, name](const Node& n, Config& c) { return kind.parse_node(n, name, member(c)); };
  } else {
    k.parse = [kind, member, name](const Node& n, Config& c) -> Status {
      if (!n.IsDefined()) return {};
      KIB_TRY_ASSIGN(auto s, scalar(n, name));
      Status st = kind.parse(s, member(c));
      if (!st.ok()) return key_error(name, st.error().message);
      return {};
    };
  }
  return k;
}

// Every key, in the order they are read (the first error found is the one reported).
const std::vector<Key>& keys() {
  using A = ApiConfig;
  using T = TlsListenerConfig;
  using E = EgressConfig;
  using D = DataplaneConfig;
  using N = DnsConfig;
  using R = RestartConfig;
  using L = AccessLogConfig;
  static const std::vector<Key> table = {
      key<&Config::api, &A::unix_socket>("api.unix_socket", UnixSocketPath{}),
      key<&Config::api, &A::unix_socket_mode>("api.unix_socket_mode", OctalMode{}),
      key<&Config::api, &A::unix_socket_group>("api.unix_socket_group", AnyString{}),
      key<&Config::api, &A::max_connections>("api.max_connections", UintIn{1, 100000}),
      key<&Config::api, &A::max_body_bytes>("api.max_body_bytes", UintIn{1024, 64 << 20}),
      key<&Config::api, &A::idle_timeout>("api.idle_timeout", Seconds{}),
      key<&Config::api, &A::request_timeout>("api.request_timeout", Seconds{}),
      key<&Config::api, &A::tls, &T::listen>("api.tls.listen", HostPort{}),
      key<&Config::api, &A::tls, &T::cert>("api.tls.cert", AbsolutePath{}),
      key<&Config::api, &A::tls, &T::key>("api.tls.key", AbsolutePath{}),
      key<&Config::api, &A::tls, &T::client_ca>("api.tls.client_ca", AbsolutePath{}),
      key<&Config::state_dir>("state_dir", AbsolutePath{}),
      key<&Config::log_level>("log.level", OneOf{{"trace", "debug", "info", "warn", "error", "critical", "off"}}),
      key<&Config::log_format>("log.format", OneOf{{"text", "json"}}),
      key<&Config::access_log, &L::path>("log.access.path", AccessLogTarget{}),
      key<&Config::access_log, &L::format>("log.access.format", OneOf{{"json"}}),
      key<&Config::access_log, &L::max_lines_per_second>("log.access.max_lines_per_second", UintIn{1, 1000000}),
      key<&Config::commands_retention>("commands.retention", Seconds{}),
      key<&Config::egress, &E::allowed_special_purpose_cidrs>("egress.allowed_special_purpose_cidrs",
                                                              StringList{check_cidr}),
      key<&Config::egress, &E::resolvers>("egress.resolvers", StringList{check_resolver}),
      key<&Config::egress, &E::resolve_timeout>("egress.resolve_timeout", Millis{}),
      key<&Config::egress, &E::max_egresses>("egress.max_egresses", UintIn{1, 1000000}),
      key<&Config::dataplane, &D::threads>("dataplane.threads", UintIn{0, 1024}),
      key<&Config::dataplane, &D::workspace_loops>("dataplane.workspace_loops", UintIn{1, 1024}),
      key<&Config::dataplane, &D::max_connections>("dataplane.max_connections", UintIn{1, 10000000}),
      key<&Config::dataplane, &D::max_connections_per_workspace>("dataplane.max_connections_per_workspace",
                                                                 UintIn{1, 10000000}),
      key<&Config::dataplane, &D::connect_timeout>("dataplane.connect_timeout", Seconds{}),
      key<&Config::dataplane, &D::handshake_timeout>("dataplane.handshake_timeout", Seconds{}),
      key<&Config::dataplane, &D::idle_timeout>("dataplane.idle_timeout", Seconds{}),
      key<&Config::dataplane, &D::splice_coalesce_us>("dataplane.splice_coalesce_us", UintIn{0, 100000}),
      key<&Config::dataplane, &D::egress_probe_interval>("dataplane.egress_probe_interval", Seconds{}),
      key<&Config::dataplane, &D::direct_descriptors>("dataplane.direct_descriptors", Bool{}),
      key<&Config::dataplane, &D::guest_congestion_control>("dataplane.guest_congestion_control", CongestionControl{}),
      // The per-Workspace DNS limits; max_in_flight stays inside one 16-bit DNS ID space.
      key<&Config::dns, &N::max_in_flight>("dns.max_in_flight", UintIn{1, 60000}),
      key<&Config::dns, &N::query_timeout>("dns.query_timeout", Millis{seconds(60), "60s"}),
      key<&Config::dns, &N::reply_sockets>("dns.reply_sockets", UintIn{1, 65536}),
      key<&Config::dns, &N::max_guest_tcp_connections>("dns.max_guest_tcp_connections", UintIn{1, 65536}),
      key<&Config::dns, &N::upstream_idle_timeout>("dns.upstream_idle_timeout", Millis{}),
      key<&Config::dns, &N::guest_tcp_idle_timeout>("dns.guest_tcp_idle_timeout", Millis{}),
      key<&Config::restart, &R::drain_timeout>("restart.drain_timeout", Seconds{}),
  };
  return table;
}

// "api.tls.listen" -> "api.tls"; "state_dir" -> "".
std::string section_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// The names directly inside `section` (keys and subsections), from the table.
std::vector<std::string> children_of(const std::string& section) {
  std::vector<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& k : keys()) {
    if (k.name.rfind(prefix, 0) != 0) continue;
    std::string rest = k.name.substr(prefix.size());
    rest = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), rest) == out.end()) out.push_back(rest);
  }
  return out;
}

// Checks that `n` is a mapping whose keys are all in the table under `path`.
Status check_map(const Node& n, const std::string& path) {
  if (!n.IsMap()) return key_error(path.empty() ? "(top level)" : path, "expected a mapping");
  const auto known = children_of(path);
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return key_error(path.empty() ? "(top level)" : path, "keys must be strings");
    const std::string& k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) == known.end()) return key_error(join(path, k), "unknown key");
  }
  return {};
}

// The TLS listener is all or nothing: without a client CA it could not authenticate.
Status check_tls_complete(const TlsListenerConfig& t) {
  if (t.listen.empty()) return {};
  if (t.cert.empty()) return key_error("api.tls.cert", "required when api.tls.listen is set");
  if (t.key.empty()) return key_error("api.tls.key", "required when api.tls.listen is set");
  if (t.client_ca.empty()) return key_error("api.tls.client_ca", "required when api.tls.listen is set");
  return {};
}

// Reads every key of the table that `root` sets. A section is checked for unknown
// keys when its first key is reached; an absent or empty section keeps its defaults.
Status parse_root(const Node& root, Config& c) {
  std::map<std::string, std::optional<Node>> sections;  // checked; nullopt: absent
  std::function<Result<std::optional<Node>>(const std::string&)> section =
      [&](const std::string& path) -> Result<std::optional<Node>> {
    if (auto it = sections.find(path); it != sections.end()) return it->second;
    std::optional<Node> n;
    if (path.empty()) {
      n = root;
    } else {
      KIB_TRY_ASSIGN(auto parent, section(section_of(path)));
      if (parent) n = std::as_const(*parent)[path.substr(path.rfind('.') + 1)];
    }
    if (n && !present(*n)) n.reset();
    if (n) KIB_TRY(check_map(*n, path));
    sections[path] = n;
    return n;
  };
  std::string last_section;
  for (const auto& k : keys()) {
    const std::string s = section_of(k.name);
    // The api section ends with its completeness check, as it always has.
    if (last_section.rfind("api", 0) == 0 && s.rfind("api", 0) != 0) KIB_TRY(check_tls_complete(c.api.tls));
    last_section = s;
    KIB_TRY_ASSIGN(auto n, section(s));
    if (!n) continue;
    KIB_TRY(k.parse(std::as_const(*n)[k.name.substr(k.name.rfind('.') + 1)], c));
  }
  return {};
}

}  // namespace

Result<Config> parse_config(const std::string& yaml_text, const Config& defaults) {
  Config c = defaults;
  try {
    const Node root = YAML::Load(yaml_text);
    Status st = parse_root(root, c);
    if (!st.ok()) return std::move(st).error();
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports syntax errors with a line and column.
    return Error{Code::invalid_argument, std::string("invalid YAML: ") + e.what()};
  } catch (const std::exception& e) {
    return Error{Code::invalid_argument, std::string("invalid config: ") + e.what()};
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> config_values(const Config& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : keys()) out.emplace_back(k.name, k.show(c));
  return out;
}

Result<Config> parse_config(const std::string& yaml_text) { return parse_config(yaml_text, Config{}); }

Result<Config> load_config_file(const std::string& path, const Config& defaults) {
  std::ifstream in(path);
  if (!in) return Error{Code::invalid_argument, "cannot read config file " + path};
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error{Code::invalid_argument, "cannot read config file " + path};
  auto r = parse_config(ss.str(), defaults);
  if (!r.ok()) return Error{Code::invalid_argument, path + ": " + r.error().message};
  return r;
}

Result<Config> load_config_file(const std::string& path) { return load_config_file(path, Config{}); }

}  // namespace kib
