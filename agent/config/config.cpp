// YAML -> kib::Config. Every key is optional; unknown keys and bad values are errors
// naming the dotted key, so an operator's typo stops the start instead of passing.
#include "agent/config/config.h"

#include <sys/un.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

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

// Checks that `n` is a mapping whose keys are all in `known`.
Status check_map(const Node& n, const std::string& path, std::initializer_list<std::string_view> known) {
  if (!n.IsMap()) return key_error(path.empty() ? "(top level)" : path, "expected a mapping");
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return key_error(path.empty() ? "(top level)" : path, "keys must be strings");
    const std::string& k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) == known.end()) return key_error(join(path, k), "unknown key");
  }
  return {};
}

// A present child section, or nullptr-like (IsDefined false / null) when absent.
bool present(const Node& n) { return n.IsDefined() && !n.IsNull(); }

Result<std::string> scalar(const Node& n, const std::string& key) {
  if (!n.IsScalar()) return key_error(key, "expected a single value");
  return n.Scalar();
}

// Applies `parse` to the scalar at n[name] if present, naming the key in errors.
template <typename Parse>
Status with_scalar(const Node& parent, const std::string& prefix, const char* name, Parse parse) {
  const Node n = parent[name];
  if (!n.IsDefined()) return {};
  const std::string key = join(prefix, name);
  KIB_TRY_ASSIGN(auto s, scalar(n, key));
  Status st = parse(s);
  if (!st.ok()) return key_error(key, st.error().message);
  return {};
}

Status parse_absolute_path(const std::string& s, std::string& out) {
  if (s.empty() || s.front() != '/') return Error{Code::invalid_argument, "expected an absolute path"};
  out = s;
  return {};
}

Status parse_uint_into(const std::string& s, uint64_t min, uint64_t max, auto& out) {
  KIB_TRY_ASSIGN(auto v, config::parse_uint(s, min, max));
  out = static_cast<std::remove_reference_t<decltype(out)>>(v);
  return {};
}

Status parse_seconds_into(const std::string& s, seconds& out) {
  KIB_TRY_ASSIGN(auto d, config::parse_duration(s));
  if (d.count() <= 0 || d.count() % 1000 != 0)
    return Error{Code::invalid_argument, "expected a positive duration in whole seconds"};
  out = duration_cast<seconds>(d);
  return {};
}

Status parse_millis_into(const std::string& s, milliseconds& out) {
  KIB_TRY_ASSIGN(auto d, config::parse_duration(s));
  if (d.count() <= 0) return Error{Code::invalid_argument, "expected a positive duration"};
  out = d;
  return {};
}

// A positive duration of at most `max` (e.g. a wait that holds a query slot).
Status parse_millis_at_most(const std::string& s, milliseconds max, const char* max_text, milliseconds& out) {
  milliseconds v{};
  KIB_TRY(parse_millis_into(s, v));
  if (v > max) return Error{Code::invalid_argument, std::string("expected at most ") + max_text};
  out = v;
  return {};
}

Status parse_one_of(const std::string& s, std::initializer_list<std::string_view> allowed, std::string& out) {
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

// A YAML sequence of strings, each checked by `check`; errors name "key[i]".
template <typename Check>
Status parse_string_list(const Node& parent, const std::string& prefix, const char* name,
                         std::vector<std::string>& out, Check check) {
  const Node n = parent[name];
  if (!n.IsDefined() || n.IsNull()) return {};
  const std::string key = join(prefix, name);
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

// The full CIDR syntax is checked by check_config_cidrs (agent/daemon), which links
// the policy library; that library is built after this one.
Status check_cidr(const std::string& s) {
  if (s.empty() || s.find_first_of(" \t") != std::string::npos)
    return Error{Code::invalid_argument, "expected a CIDR like 10.0.0.0/8"};
  return {};
}

Status parse_tls(const Node& api, ApiConfig& out) {
  const Node n = api["tls"];
  if (!present(n)) return {};
  KIB_TRY(check_map(n, "api.tls", {"listen", "cert", "key", "client_ca"}));
  TlsListenerConfig& t = out.tls;
  KIB_TRY(with_scalar(n, "api.tls", "listen", [&](const std::string& s) -> Status {
    KIB_TRY(config::check_host_port(s));
    t.listen = s;
    return {};
  }));
  KIB_TRY(with_scalar(n, "api.tls", "cert", [&](const std::string& s) { return parse_absolute_path(s, t.cert); }));
  KIB_TRY(with_scalar(n, "api.tls", "key", [&](const std::string& s) { return parse_absolute_path(s, t.key); }));
  KIB_TRY(with_scalar(n, "api.tls", "client_ca",
                      [&](const std::string& s) { return parse_absolute_path(s, t.client_ca); }));
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

Status parse_api(const Node& root, ApiConfig& api) {
  const Node n = root["api"];
  if (!present(n)) return {};
  KIB_TRY(check_map(n, "api", {"unix_socket", "unix_socket_mode", "unix_socket_group", "tls", "max_connections",
                               "max_body_bytes", "idle_timeout"}));
  KIB_TRY(with_scalar(n, "api", "unix_socket", [&](const std::string& s) -> Status {
    KIB_TRY(parse_absolute_path(s, api.unix_socket));
    if (s.size() >= sizeof(sockaddr_un::sun_path))
      return Error{Code::invalid_argument, "path too long for a Unix socket (max 107 bytes)"};
    return {};
  }));
  KIB_TRY(with_scalar(n, "api", "unix_socket_mode", [&](const std::string& s) -> Status {
    KIB_TRY_ASSIGN(auto m, config::parse_octal_mode(s));
    api.unix_socket_mode = m;
    return {};
  }));
  KIB_TRY(with_scalar(n, "api", "unix_socket_group", [&](const std::string& s) -> Status {
    api.unix_socket_group = s;
    return {};
  }));
  KIB_TRY(with_scalar(n, "api", "max_connections",
                      [&](const std::string& s) { return parse_uint_into(s, 1, 100000, api.max_connections); }));
  KIB_TRY(with_scalar(n, "api", "max_body_bytes",
                      [&](const std::string& s) { return parse_uint_into(s, 1024, 64 << 20, api.max_body_bytes); }));
  KIB_TRY(with_scalar(n, "api", "idle_timeout",
                      [&](const std::string& s) { return parse_seconds_into(s, api.idle_timeout); }));
  KIB_TRY(parse_tls(n, api));
  return check_tls_complete(api.tls);
}

Status parse_log(const Node& root, Config& c) {
  const Node n = root["log"];
  if (!present(n)) return {};
  KIB_TRY(check_map(n, "log", {"level", "format"}));
  KIB_TRY(with_scalar(n, "log", "level", [&](const std::string& s) {
    return parse_one_of(s, {"trace", "debug", "info", "warn", "error", "critical", "off"}, c.log_level);
  }));
  KIB_TRY(with_scalar(n, "log", "format",
                      [&](const std::string& s) { return parse_one_of(s, {"text", "json"}, c.log_format); }));
  return {};
}

Status parse_commands(const Node& root, Config& c) {
  const Node n = root["commands"];
  if (!present(n)) return {};
  KIB_TRY(check_map(n, "commands", {"retention"}));
  return with_scalar(n, "commands", "retention",
                     [&](const std::string& s) { return parse_seconds_into(s, c.commands_retention); });
}

Status parse_egress(const Node& root, EgressConfig& e) {
  const Node n = root["egress"];
  if (!present(n)) return {};
  KIB_TRY(check_map(n, "egress", {"allowed_special_purpose_cidrs", "resolvers", "resolve_timeout"}));
  KIB_TRY(parse_string_list(n, "egress", "allowed_special_purpose_cidrs", e.allowed_special_purpose_cidrs,
                            check_cidr));
  KIB_TRY(parse_string_list(n, "egress", "resolvers", e.resolvers,
                            [](const std::string& s) { return config::check_ip_maybe_port(s); }));
  return with_scalar(n, "egress", "resolve_timeout",
                     [&](const std::string& s) { return parse_millis_into(s, e.resolve_timeout); });
}

Status parse_dataplane(const Node& root, DataplaneConfig& d) {
  const Node n = root["dataplane"];
  if (!present(n)) return {};
  const std::string p = "dataplane";
  KIB_TRY(check_map(n, p, {"threads", "workspace_loops", "max_connections", "max_connections_per_workspace", "connect_timeout",
                           "handshake_timeout", "idle_timeout", "guest_congestion_control",
                           "direct_descriptors", "splice_coalesce_us"}));
  KIB_TRY(with_scalar(n, p, "threads", [&](const std::string& s) { return parse_uint_into(s, 0, 1024, d.threads); }));
  KIB_TRY(with_scalar(n, p, "workspace_loops",
                      [&](const std::string& s) { return parse_uint_into(s, 1, 1024, d.workspace_loops); }));
  KIB_TRY(with_scalar(n, p, "max_connections",
                      [&](const std::string& s) { return parse_uint_into(s, 1, 10000000, d.max_connections); }));
  KIB_TRY(with_scalar(n, p, "max_connections_per_workspace", [&](const std::string& s) {
    return parse_uint_into(s, 1, 10000000, d.max_connections_per_workspace);
  }));
  KIB_TRY(with_scalar(n, p, "connect_timeout",
                      [&](const std::string& s) { return parse_seconds_into(s, d.connect_timeout); }));
  KIB_TRY(with_scalar(n, p, "handshake_timeout",
                      [&](const std::string& s) { return parse_seconds_into(s, d.handshake_timeout); }));
  KIB_TRY(with_scalar(n, p, "idle_timeout",
                      [&](const std::string& s) { return parse_seconds_into(s, d.idle_timeout); }));
  KIB_TRY(with_scalar(n, p, "splice_coalesce_us",
                      [&](const std::string& s) { return parse_uint_into(s, 0, 100000, d.splice_coalesce_us); }));
  KIB_TRY(with_scalar(n, p, "direct_descriptors", [&](const std::string& s) -> Status {
    if (s != "true" && s != "false") return Error{Code::invalid_argument, "must be true or false"};
    d.direct_descriptors = s == "true";
    return {};
  }));
  return with_scalar(n, p, "guest_congestion_control", [&](const std::string& s) -> Status {
    // A kernel algorithm name (TCP_CA_NAME_MAX is 16 with the NUL); whether this
    // kernel has it is checked when the data plane starts.
    const bool ok = s.size() < 16 && std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!ok) return Error{Code::invalid_argument, "must be a congestion control name such as cubic, or empty"};
    d.guest_congestion_control = s;
    return {};
  });
}

// The per-Workspace DNS limits; max_in_flight stays inside one 16-bit DNS ID space.
Status parse_dns(const Node& root, DnsConfig& d) {
  const Node n = root["dns"];
  if (!present(n)) return {};
  const std::string p = "dns";
  KIB_TRY(check_map(n, p, {"max_in_flight", "query_timeout", "reply_sockets", "max_guest_tcp_connections",
                           "upstream_idle_timeout", "guest_tcp_idle_timeout"}));
  KIB_TRY(with_scalar(n, p, "max_in_flight",
                      [&](const std::string& s) { return parse_uint_into(s, 1, 60000, d.max_in_flight); }));
  KIB_TRY(with_scalar(n, p, "query_timeout",
                      [&](const std::string& s) { return parse_millis_at_most(s, seconds(60), "60s", d.query_timeout); }));
  KIB_TRY(with_scalar(n, p, "reply_sockets",
                      [&](const std::string& s) { return parse_uint_into(s, 1, 65536, d.reply_sockets); }));
  KIB_TRY(with_scalar(n, p, "max_guest_tcp_connections", [&](const std::string& s) {
    return parse_uint_into(s, 1, 65536, d.max_guest_tcp_connections);
  }));
  KIB_TRY(with_scalar(n, p, "upstream_idle_timeout",
                      [&](const std::string& s) { return parse_millis_into(s, d.upstream_idle_timeout); }));
  KIB_TRY(with_scalar(n, p, "guest_tcp_idle_timeout",
                      [&](const std::string& s) { return parse_millis_into(s, d.guest_tcp_idle_timeout); }));
  return {};
}

Status parse_root(const Node& root, Config& c) {
  if (!present(root)) return {};  // an empty file: every default
  KIB_TRY(check_map(root, "", {"api", "state_dir", "log", "commands", "egress", "dataplane", "dns"}));
  KIB_TRY(parse_api(root, c.api));
  KIB_TRY(with_scalar(root, "", "state_dir", [&](const std::string& s) { return parse_absolute_path(s, c.state_dir); }));
  KIB_TRY(parse_log(root, c));
  KIB_TRY(parse_commands(root, c));
  KIB_TRY(parse_egress(root, c.egress));
  KIB_TRY(parse_dataplane(root, c.dataplane));
  return parse_dns(root, c.dns);
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
