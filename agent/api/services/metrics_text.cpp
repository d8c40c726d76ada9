#include "agent/api/services/metrics_text.h"

#include <algorithm>
#include <cstdio>

namespace kib::api {
namespace {

// "label_value can be any sequence of UTF-8 characters, but the backslash, the
// double-quote and the line feed must be escaped".
std::string escaped(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // labels: name="value" pairs, already escaped.
  void sample(const char* name, const std::string& labels, uint64_t value) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += ' ';  // not " " + std::to_string(): GCC 12 -O2 -Wrestrict false positive (PR 105329)
    out_ += std::to_string(value);
    out_ += '\n';
  }
  void sample(const char* name, double value) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", value);
    out_ += std::string(name) + " " + buf + "\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string ws_label(const WorkspaceMetrics& w) { return "workspace_id=\"" + escaped(w.workspace_id) + "\""; }

std::string egress_labels(const WorkspaceMetrics& w, const EgressMetrics& e) {
  return ws_label(w) + ",egress_id=\"" + escaped(e.egress_id) + "\"";
}

void egress_family(Writer& out, const std::vector<WorkspaceMetrics>& ws, const char* name, const char* type,
                   const char* help, uint64_t EgressMetrics::*field) {
  out.family(name, type, help);
  for (const auto& w : ws)
    for (const auto& e : w.egresses) out.sample(name, egress_labels(w, e), e.*field);
}

void dns_family(Writer& out, const std::vector<WorkspaceMetrics>& ws, const char* name, const char* type,
                const char* help, uint64_t DnsMetrics::*field) {
  out.family(name, type, help);
  for (const auto& w : ws)
    if (w.dns) out.sample(name, ws_label(w), (*w.dns).*field);
}

// Only Workspaces whose policy has resolvers have these series.
void dns_families(Writer& out, const std::vector<WorkspaceMetrics>& ws) {
  dns_family(out, ws, "kibotos_dns_queries_total", "counter",
             "Guest DNS queries the agent accepted, since this process attached the Workspace.", &DnsMetrics::queries);
  dns_family(out, ws, "kibotos_dns_answers_total", "counter", "Resolvers' answers delivered to the guest.",
             &DnsMetrics::answers);
  dns_family(out, ws, "kibotos_dns_timeouts_total", "counter",
             "Attempts at a resolver that timed out (each may fail over to the next).", &DnsMetrics::timeouts);
  dns_family(out, ws, "kibotos_dns_failovers_total", "counter", "Queries moved to the next resolver.",
             &DnsMetrics::failovers);
  dns_family(out, ws, "kibotos_dns_in_flight", "gauge", "Guest DNS queries waiting for an answer now.",
             &DnsMetrics::in_flight);
  out.family("kibotos_dns_failures_total", "counter",
             "DNS failures, by reason as in status: queries refused (inflight_cap, malformed_query), "
             "resolvers' answers dropped (malformed_answer, unknown_answer), queries every resolver failed "
             "(upstream_error, timeout).");
  for (const auto& w : ws) {
    if (!w.dns) continue;
    for (const auto& [reason, n] : w.dns->failures)
      out.sample("kibotos_dns_failures_total", ws_label(w) + ",reason=\"" + escaped(reason) + "\"", n);
  }
}

}  // namespace

std::string prometheus_text(const AgentTotals& totals, std::vector<WorkspaceMetrics> ws) {
  std::sort(ws.begin(), ws.end(), [](const auto& a, const auto& b) { return a.workspace_id < b.workspace_id; });
  for (auto& w : ws)
    std::sort(w.egresses.begin(), w.egresses.end(),
              [](const auto& a, const auto& b) { return a.egress_id < b.egress_id; });
  Writer out;
  out.family("kibotos_uptime_seconds", "gauge", "Seconds since this agent process started.");
  out.sample("kibotos_uptime_seconds", totals.uptime_seconds);
  out.family("kibotos_workspaces", "gauge", "Workspaces stored (not deleted).");
  out.sample("kibotos_workspaces", "", totals.workspaces);
  out.family("kibotos_egresses", "gauge", "Egresses stored (not deleted).");
  out.sample("kibotos_egresses", "", totals.egresses);
  out.family("kibotos_connections", "gauge", "Relayed guest connections now, by state.");
  out.sample("kibotos_connections", "state=\"active\"", totals.connections.active_connections);
  out.sample("kibotos_connections", "state=\"draining\"", totals.connections.draining_connections);
  egress_family(out, ws, "kibotos_egress_active_connections", "gauge",
                "Relayed connections of a Workspace through an Egress on its applied revision.",
                &EgressMetrics::active_connections);
  egress_family(out, ws, "kibotos_egress_draining_connections", "gauge",
                "Relayed connections of a Workspace draining from an Egress revision or route it left.",
                &EgressMetrics::draining_connections);
  egress_family(out, ws, "kibotos_egress_dial_failures_total", "counter",
                "Guest connections reset because the dial through the Egress failed (refusals included), "
                "since this process attached the Workspace.",
                &EgressMetrics::dial_failures);
  egress_family(out, ws, "kibotos_egress_dial_refusals_total", "counter",
                "Guest connections reset because every address of the Egress endpoint failed the "
                "special-purpose check, since this process attached the Workspace.",
                &EgressMetrics::dial_refusals);
  out.family("kibotos_guest_connections_refused_total", "counter",
             "Guest connections reset before any dial, by reason: over_limit (a connection cap), uncovered "
             "(no route of the policy covers it).");
  for (const auto& w : ws) {
    out.sample("kibotos_guest_connections_refused_total", ws_label(w) + ",reason=\"over_limit\"", w.refused_over_limit);
    out.sample("kibotos_guest_connections_refused_total", ws_label(w) + ",reason=\"uncovered\"", w.refused_uncovered);
  }
  dns_families(out, ws);
  return out.take();
}

}  // namespace kib::api
