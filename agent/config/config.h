#pragma once
// The agent's configuration. Every key is optional: the defaults below are the
// embedded configuration, so `kibotos-agent` alone runs.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/common/result.h"

namespace kib {

struct TlsListenerConfig {
  std::string listen;     // "host:port"; empty disables the TLS listener
  std::string cert;       // PEM server certificate chain
  std::string key;        // PEM private key
  std::string client_ca;  // PEM Operator CA; client certificates must chain to it
};

struct ApiConfig {
  std::string unix_socket = "/run/kibotos/ctrl.sock";
  uint32_t unix_socket_mode = 0660;
  std::string unix_socket_group;  // empty: the agent's own group
  TlsListenerConfig tls;
  uint32_t max_connections = 256;
  size_t max_body_bytes = 1 << 20;
  // A connection with no request for this long is closed.
  std::chrono::seconds idle_timeout{60};
  // The longest a request (headers and body) may take to arrive, from its first byte.
  std::chrono::seconds request_timeout{30};
};

struct EgressConfig {
  // CIDRs exempt from the special-purpose check (labs and tests).
  std::vector<std::string> allowed_special_purpose_cidrs;
  // Nameservers for endpoint resolution ("ip" or "ip:port"); empty = /etc/resolv.conf.
  std::vector<std::string> resolvers;
  std::chrono::milliseconds resolve_timeout{2000};
  // Most Egresses stored at once: CreateEgress beyond answers resource_exhausted.
  uint32_t max_egresses = 10000;
};

struct DataplaneConfig {
  uint32_t threads = 0;  // 0 = one loop per core
  // Loops that accept each Workspace's relayed TCP (one SO_REUSEPORT listener per
  // family on each): at least 1; more than there are loops means all of them.
  // Workspaces are spread over the loops, so the default still uses every core
  // while a Workspace costs one listener per family.
  uint32_t workspace_loops = 1;
  uint32_t max_connections = 100000;
  uint32_t max_connections_per_workspace = 20000;
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds handshake_timeout{10};
  std::chrono::seconds idle_timeout{3600};
  // TCP congestion control of the guest-facing sockets (a local link to the guest);
  // empty: the Workspace namespace's default. Not BBR there: its pacing timers cost
  // the relay ~30% more CPU per GB toward the guest for nothing on a local link.
  std::string guest_congestion_control = "cubic";
  // Upstream sockets as io_uring direct descriptors where the kernel can (6.8+): one
  // fd per relayed connection instead of two, and no socket()/setsockopt/shutdown
  // syscalls on the dial path. false: plain fds always.
  bool direct_descriptors = true;
  // The longest (µs) a spliced (bulk) flow whose sender is slower than the relay
  // lets bytes gather between reads; later waits follow its rate, down to a quarter
  // of this. 0: a read per burst (see relay::RelayTimeouts, relay/gather_wait.h).
  uint32_t splice_coalesce_us = 8000;
  // How often the server of each Egress a Workspace uses is asked for a SOCKS5
  // exchange (its health in status and metrics); at least 1 s.
  std::chrono::seconds egress_probe_interval{10};
};

// The guest DNS of each Workspace whose policy has resolvers.
struct DnsConfig {
  // Queries waiting for an answer, per Workspace; beyond, a query gets no answer.
  uint32_t max_in_flight = 4096;
  // Time a resolver has to answer one query before the next resolver is tried.
  std::chrono::milliseconds query_timeout{2000};
  // Transparent reply sockets kept open per Workspace (one per address the guest asked).
  uint32_t reply_sockets = 256;
  // Guest DNS-over-TCP connections per Workspace.
  uint32_t max_guest_tcp_connections = 256;
  // A UDP association or TCP connection to a resolver unused for this long is closed.
  std::chrono::milliseconds upstream_idle_timeout{60000};
  // A guest DNS-over-TCP connection with no query pending for this long is closed.
  std::chrono::milliseconds guest_tcp_idle_timeout{10000};
};

// Take-over (kibotos-agent --take-over): how long the agent that handed over keeps
// relaying the connections it has before it resets what is left and exits.
struct RestartConfig {
  std::chrono::seconds drain_timeout{3600};
};

// log.access: one JSON line per relayed guest connection when it ends (off: no path).
struct AccessLogConfig {
  std::string path;  // an absolute file path, or "journal" (the agent's stderr)
  std::string format = "json";
  uint32_t max_lines_per_second = 1000;  // beyond: dropped and counted
};

struct Config {
  ApiConfig api;
  std::string state_dir = "/var/lib/kibotos";
  std::string log_level = "info";   // trace|debug|info|warn|error|off
  std::string log_format = "text";  // text|json
  AccessLogConfig access_log;
  std::chrono::seconds commands_retention{24 * 3600};
  EgressConfig egress;
  DataplaneConfig dataplane;
  DnsConfig dns;
  RestartConfig restart;
};

// Parses YAML text. Unknown keys and bad values are errors naming the key.
Result<Config> parse_config(const std::string& yaml_text);
Result<Config> load_config_file(const std::string& path);
// The same over other defaults (the daemon's, e.g. from $STATE_DIRECTORY): keys the
// YAML sets win, the others keep `defaults`.
Result<Config> parse_config(const std::string& yaml_text, const Config& defaults);
Result<Config> load_config_file(const std::string& path, const Config& defaults);

// Every key of the configuration with its value in `c`, in the file's notation
// ("dataplane.idle_timeout", "3600s"), from the same table the parser reads keys
// with: config_values(Config{}) are the defaults the documentation must show.
std::vector<std::pair<std::string, std::string>> config_values(const Config& c);

}  // namespace kib
