// The config file: every key optional with embedded defaults; unknown keys and bad
// values are errors naming the dotted key.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "agent/config/config.h"

using kib::Config;
using kib::parse_config;

namespace {

// The error message of parsing `yaml`, or "" if it parsed.
std::string error_of(const std::string& yaml) {
  auto r = parse_config(yaml);
  return r.ok() ? std::string() : r.error().message;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("an empty config file gives every embedded default") {
  auto r = parse_config("");
  REQUIRE(r.ok());
  const Config& c = *r;
  CHECK(c.api.unix_socket == "/run/kibotos/ctrl.sock");
  CHECK(c.api.unix_socket_mode == 0660);
  CHECK(c.api.unix_socket_group.empty());
  CHECK(c.api.tls.listen.empty());
  CHECK(c.api.max_connections == 256);
  CHECK(c.api.max_body_bytes == 1u << 20);
  CHECK(c.state_dir == "/var/lib/kibotos");
  CHECK(c.log_level == "info");
  CHECK(c.log_format == "text");
  CHECK(c.commands_retention == std::chrono::hours(24));
  CHECK(c.egress.allowed_special_purpose_cidrs.empty());
  CHECK(c.dataplane.threads == 0);
  CHECK(c.dataplane.workspace_loops == 1);
  CHECK(c.dataplane.guest_congestion_control == "cubic");
  CHECK(c.dataplane.direct_descriptors);
  CHECK(c.dataplane.splice_coalesce_us == 8000);
  CHECK(c.dns.max_in_flight == 4096);
  CHECK(c.dns.query_timeout == std::chrono::seconds(2));
  CHECK(c.dns.reply_sockets == 256);
  CHECK(c.dns.max_guest_tcp_connections == 256);
  CHECK(c.dns.upstream_idle_timeout == std::chrono::seconds(60));
  CHECK(c.dns.guest_tcp_idle_timeout == std::chrono::seconds(10));
}

TEST_CASE("a config of only comments or empty sections gives the defaults") {
  CHECK(parse_config("# nothing\n").ok());
  auto r = parse_config("api:\nlog:\n");
  REQUIRE(r.ok());
  CHECK(r->api.unix_socket == "/run/kibotos/ctrl.sock");
}

TEST_CASE("every documented key is read") {
  auto r = parse_config(R"(
api:
  unix_socket: /tmp/k/ctrl.sock
  unix_socket_mode: 0600
  unix_socket_group: kibotos
  max_connections: 64
  max_body_bytes: 2048
  idle_timeout: 30s
  tls:
    listen: "127.0.0.1:8443"
    cert: /etc/k/server.pem
    key: /etc/k/server.key
    client_ca: /etc/k/ca.pem
state_dir: /tmp/k/state
log: {level: debug, format: json}
commands: {retention: 90m}
egress:
  allowed_special_purpose_cidrs: [10.0.0.0/8, "fd00::/8"]
  resolvers: ["127.0.0.53", "192.0.2.1:5353", "[2001:db8::1]:53"]
  resolve_timeout: 1500ms
dataplane:
  threads: 2
  workspace_loops: 2
  max_connections: 5000
  max_connections_per_workspace: 100
  connect_timeout: 5s
  handshake_timeout: 7
  idle_timeout: 1h
  guest_congestion_control: reno
  direct_descriptors: false
  splice_coalesce_us: 0
dns:
  max_in_flight: 100
  query_timeout: 750ms
  reply_sockets: 16
  max_guest_tcp_connections: 8
  upstream_idle_timeout: 2m
  guest_tcp_idle_timeout: 3s
)");
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  const Config& c = *r;
  CHECK(c.api.unix_socket == "/tmp/k/ctrl.sock");
  CHECK(c.api.unix_socket_mode == 0600);
  CHECK(c.api.unix_socket_group == "kibotos");
  CHECK(c.api.max_connections == 64);
  CHECK(c.api.max_body_bytes == 2048);
  CHECK(c.api.idle_timeout == std::chrono::seconds(30));
  CHECK(c.api.tls.listen == "127.0.0.1:8443");
  CHECK(c.api.tls.cert == "/etc/k/server.pem");
  CHECK(c.api.tls.key == "/etc/k/server.key");
  CHECK(c.api.tls.client_ca == "/etc/k/ca.pem");
  CHECK(c.state_dir == "/tmp/k/state");
  CHECK(c.log_level == "debug");
  CHECK(c.log_format == "json");
  CHECK(c.commands_retention == std::chrono::minutes(90));
  CHECK(c.egress.allowed_special_purpose_cidrs == std::vector<std::string>{"10.0.0.0/8", "fd00::/8"});
  CHECK(c.egress.resolvers.size() == 3);
  CHECK(c.egress.resolve_timeout == std::chrono::milliseconds(1500));
  CHECK(c.dataplane.threads == 2);
  CHECK(c.dataplane.workspace_loops == 2);
  CHECK(c.dataplane.max_connections == 5000);
  CHECK(c.dataplane.max_connections_per_workspace == 100);
  CHECK(c.dataplane.connect_timeout == std::chrono::seconds(5));
  CHECK(c.dataplane.handshake_timeout == std::chrono::seconds(7));
  CHECK(c.dataplane.idle_timeout == std::chrono::hours(1));
  CHECK(c.dataplane.guest_congestion_control == "reno");
  CHECK_FALSE(c.dataplane.direct_descriptors);
  CHECK(c.dataplane.splice_coalesce_us == 0);
  CHECK(c.dns.max_in_flight == 100);
  CHECK(c.dns.query_timeout == std::chrono::milliseconds(750));
  CHECK(c.dns.reply_sockets == 16);
  CHECK(c.dns.max_guest_tcp_connections == 8);
  CHECK(c.dns.upstream_idle_timeout == std::chrono::minutes(2));
  CHECK(c.dns.guest_tcp_idle_timeout == std::chrono::seconds(3));
}

TEST_CASE("unknown keys are errors naming the dotted key") {
  CHECK(error_of("colour: blue\n") == "colour: unknown key");
  CHECK(error_of("api:\n  unix_sockett: /x\n") == "api.unix_sockett: unknown key");
  CHECK(error_of("api:\n  tls:\n    listen_on: x\n") == "api.tls.listen_on: unknown key");
  CHECK(error_of("dataplane: {thread: 2}\n") == "dataplane.thread: unknown key");
  CHECK(error_of("log: {colour: 1}\n") == "log.colour: unknown key");
  CHECK(error_of("dns: {max_inflight: 2}\n") == "dns.max_inflight: unknown key");
}

TEST_CASE("bad DNS limits are errors naming the key") {
  CHECK(starts_with(error_of("dns: {max_in_flight: 0}\n"), "dns.max_in_flight: expected an integer"));
  // The cap stays inside one 16-bit DNS ID space.
  CHECK(starts_with(error_of("dns: {max_in_flight: 60001}\n"), "dns.max_in_flight: expected an integer"));
  CHECK(parse_config("dns: {max_in_flight: 60000}\n").ok());
  CHECK(starts_with(error_of("dns: {query_timeout: 0}\n"), "dns.query_timeout: expected a positive duration"));
  CHECK(error_of("dns: {query_timeout: 61s}\n") == "dns.query_timeout: expected at most 60s");
  CHECK(starts_with(error_of("dns: {reply_sockets: many}\n"), "dns.reply_sockets: "));
  CHECK(starts_with(error_of("dns: {reply_sockets: 0}\n"), "dns.reply_sockets: "));
  CHECK(starts_with(error_of("dns: {max_guest_tcp_connections: -3}\n"), "dns.max_guest_tcp_connections: "));
  CHECK(starts_with(error_of("dns: {upstream_idle_timeout: soon}\n"), "dns.upstream_idle_timeout: "));
  CHECK(starts_with(error_of("dns: {guest_tcp_idle_timeout: 0s}\n"), "dns.guest_tcp_idle_timeout: "));
  CHECK(error_of("dns: 5\n") == "dns: expected a mapping");
}

TEST_CASE("bad values are errors naming the key") {
  CHECK(error_of("api: {unix_socket_mode: rw}\n") == "api.unix_socket_mode: expected an octal mode like 0660");
  CHECK(error_of("api: {unix_socket_mode: 0999}\n") == "api.unix_socket_mode: expected an octal mode like 0660");
  CHECK(starts_with(error_of("api: {unix_socket: relative.sock}\n"), "api.unix_socket: "));
  CHECK(starts_with(error_of("api: {max_connections: 0}\n"), "api.max_connections: expected an integer"));
  CHECK(starts_with(error_of("api: {max_connections: lots}\n"), "api.max_connections: "));
  CHECK(starts_with(error_of("state_dir: var/lib\n"), "state_dir: expected an absolute path"));
  CHECK(starts_with(error_of("log: {level: loud}\n"), "log.level: expected one of"));
  CHECK(error_of("log: {format: xml}\n") == "log.format: expected one of text|json");
  CHECK(error_of("log: {access: {path: access.log}}\n") == "log.access.path: expected an absolute path or \"journal\"");
  CHECK(error_of("log: {access: {format: text}}\n") == "log.access.format: expected one of json");
  CHECK(starts_with(error_of("log: {access: {max_lines_per_second: 0}}\n"), "log.access.max_lines_per_second: "));
  CHECK(starts_with(error_of("log: {access: {pth: /x}}\n"), "log.access.pth: "));
  CHECK(starts_with(error_of("commands: {retention: forever}\n"), "commands.retention: expected a duration"));
  CHECK(starts_with(error_of("commands: {retention: 10x}\n"), "commands.retention: "));
  CHECK(starts_with(error_of("dataplane: {threads: -1}\n"), "dataplane.threads: "));
  // At least one loop accepts each Workspace's connections; more than there are
  // loops is clamped at start (the count of cores differs from host to host).
  CHECK(starts_with(error_of("dataplane: {workspace_loops: 0}\n"), "dataplane.workspace_loops: "));
  CHECK(starts_with(error_of("dataplane: {workspace_loops: 1025}\n"), "dataplane.workspace_loops: "));
  CHECK(parse_config("dataplane: {workspace_loops: 1024}\n")->dataplane.workspace_loops == 1024);
  CHECK(starts_with(error_of("dataplane: {connect_timeout: 0}\n"), "dataplane.connect_timeout: "));
  CHECK(starts_with(error_of("dataplane: {guest_congestion_control: \"cubic; drop\"}\n"),
                    "dataplane.guest_congestion_control: must be a congestion control name"));
  CHECK(starts_with(error_of("dataplane: {guest_congestion_control: abcdefghijklmnop}\n"),
                    "dataplane.guest_congestion_control: "));  // 16 characters: longer than the kernel's names
  CHECK(error_of("dataplane: {direct_descriptors: yes}\n") == "dataplane.direct_descriptors: must be true or false");
  CHECK(starts_with(error_of("dataplane: {splice_coalesce_us: 100001}\n"), "dataplane.splice_coalesce_us: "));
  CHECK(parse_config("dataplane: {guest_congestion_control: \"\"}\n")->dataplane.guest_congestion_control.empty());
  CHECK(starts_with(error_of("egress: {resolve_timeout: soon}\n"), "egress.resolve_timeout: "));
  CHECK(starts_with(error_of("egress: {resolvers: [1.2.3.4, not-an-ip]}\n"), "egress.resolvers[1]: "));
  CHECK(starts_with(error_of("egress: {resolvers: 1.2.3.4}\n"), "egress.resolvers: expected a list"));
  CHECK(starts_with(error_of("api: {tls: {listen: nowhere}}\n"), "api.tls.listen: "));
}

TEST_CASE("a wrongly shaped section is an error naming it") {
  CHECK(error_of("api: 3\n") == "api: expected a mapping");
  CHECK(error_of("- a\n- b\n") == "(top level): expected a mapping");
  CHECK(starts_with(error_of("state_dir: [a, b]\n"), "state_dir: expected a single value"));
}

TEST_CASE("the TLS listener needs its certificate, key and client CA") {
  CHECK(error_of("api: {tls: {listen: '127.0.0.1:8443', key: /k, client_ca: /ca}}\n") ==
        "api.tls.cert: required when api.tls.listen is set");
  CHECK(error_of("api: {tls: {listen: '127.0.0.1:8443', cert: /c, key: /k}}\n") ==
        "api.tls.client_ca: required when api.tls.listen is set");
}

TEST_CASE("durations accept units and bare seconds") {
  auto retention = [](const std::string& v) {
    auto r = parse_config("commands: {retention: " + v + "}\n");
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    return r->commands_retention;
  };
  CHECK(retention("24h") == std::chrono::hours(24));
  CHECK(retention("90m") == std::chrono::minutes(90));
  CHECK(retention("3600") == std::chrono::seconds(3600));
  CHECK(retention("1h30m") == std::chrono::minutes(90));
  CHECK(retention("2d") == std::chrono::hours(48));
  CHECK(!parse_config("commands: {retention: 1500ms}\n").ok());  // not whole seconds
}

TEST_CASE("invalid YAML is an error, not an exception") {
  auto r = parse_config("api: {unix_socket: [\n");
  REQUIRE(!r.ok());
  CHECK(starts_with(r.error().message, "invalid YAML"));
}

TEST_CASE("a config file that cannot be read is an error naming it") {
  auto r = kib::load_config_file("/nonexistent/kibotos.yaml");
  REQUIRE(!r.ok());
  CHECK(r.error().message.find("/nonexistent/kibotos.yaml") != std::string::npos);
}

TEST_CASE("errors from a config file name the file and the key") {
  const std::string path = "/tmp/kibotos-config-test-" + std::to_string(::getpid()) + ".yaml";
  { std::ofstream(path) << "log:\n  format: xml\n"; }
  auto r = kib::load_config_file(path);
  std::remove(path.c_str());
  REQUIRE(!r.ok());
  CHECK(r.error().message == path + ": log.format: expected one of text|json");
}

TEST_CASE("keys the file sets override the given defaults, the others keep them") {
  Config base;
  base.state_dir = "/var/lib/from-env";
  base.api.unix_socket = "/run/from-env/ctrl.sock";
  auto r = kib::parse_config("state_dir: /srv/state\n", base);
  REQUIRE(r.ok());
  CHECK(r->state_dir == "/srv/state");
  CHECK(r->api.unix_socket == "/run/from-env/ctrl.sock");
}

TEST_CASE("log.access: off by default; a file or the journal, at a rate") {
  auto off = parse_config("");
  REQUIRE(off.ok());
  CHECK(off->access_log.path.empty());
  CHECK(off->access_log.max_lines_per_second == 1000);
  auto file = parse_config("log: {access: {path: /var/log/kibotos/access.log, max_lines_per_second: 50}}\n");
  REQUIRE_MESSAGE(file.ok(), file.error().message);
  CHECK(file->access_log.path == "/var/log/kibotos/access.log");
  CHECK(file->access_log.max_lines_per_second == 50);
  auto journal = parse_config("log: {access: {path: journal}}\n");
  REQUIRE(journal.ok());
  CHECK(journal->access_log.path == "journal");
}
