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
  // A histogram's _bucket, _sum and _count samples (family(name, "histogram") first).
  void histogram(const std::string& name, const std::string& labels, const LatencyHistogram::Snapshot& h) {
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      char le[32];
      if (i < LatencyHistogram::kBoundsUs.size())
        std::snprintf(le, sizeof le, "%g", static_cast<double>(LatencyHistogram::kBoundsUs[i]) / 1e6);
      else
        std::snprintf(le, sizeof le, "+Inf");
      sample((name + "_bucket").c_str(), labels + ",le=\"" + le + "\"", h.cumulative[i]);
    }
    char sum[64];
    std::snprintf(sum, sizeof sum, "%.6f", static_cast<double>(h.sum_us) / 1e6);
    out_ += name + "_sum{" + labels + "} " + sum + "\n";
    sample((name + "_count").c_str(), labels, h.count());
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

// A family of (name, count) pairs per Workspace and Egress, under label `label`.
void egress_pairs_family(Writer& out, const std::vector<WorkspaceMetrics>& ws, const char* name, const char* help,
                         const char* label, std::vector<std::pair<std::string, uint64_t>> EgressMetrics::*field) {
  out.family(name, "counter", help);
  for (const auto& w : ws)
    for (const auto& e : w.egresses)
      for (const auto& [value, n] : e.*field)
        out.sample(name, egress_labels(w, e) + "," + label + "=\"" + escaped(value) + "\"", n);
}

void accounting_families(Writer& out, const std::vector<WorkspaceMetrics>& ws) {
  egress_family(out, ws, "kibotos_egress_connections_opened_total", "counter",
                "Guest connections routed to the Egress (a dial started) or inherited from the previous agent "
                "process, since this process attached the Workspace.",
                &EgressMetrics::opened);
  egress_pairs_family(out, ws, "kibotos_egress_connections_closed_total",
                      "Guest connections through the Egress that ended, by reason (as ConnectionCounters.closed).",
                      "reason", &EgressMetrics::closed);
  egress_pairs_family(out, ws, "kibotos_egress_dial_failures_by_cause_total",
                      "Failed dials through the Egress, by cause (as ConnectionCounters.dial_failures).", "cause",
                      &EgressMetrics::dial_failed_by);
  out.family("kibotos_egress_bytes_total", "counter",
             "Application bytes of the Workspace's connections through the Egress (plaintext inside TLS), by "
             "direction: from_guest (read from the guest), to_guest (written to it).");
  for (const auto& w : ws)
    for (const auto& e : w.egresses) {
      out.sample("kibotos_egress_bytes_total", egress_labels(w, e) + ",direction=\"from_guest\"", e.bytes_from_guest);
      out.sample("kibotos_egress_bytes_total", egress_labels(w, e) + ",direction=\"to_guest\"", e.bytes_to_guest);
    }
}

struct StageFamily {
  const char* stage;
  const char* name;
  const char* help;
};
constexpr StageFamily kStageFamilies[] = {
    {"resolve", "kibotos_egress_resolve_duration_seconds",
     "Resolving the Egress endpoint's host name, per dial that resolved it."},
    {"connect", "kibotos_egress_connect_duration_seconds",
     "The TCP connect to the Egress endpoint (every address tried), per dial that connected."},
    {"tls_handshake", "kibotos_egress_tls_handshake_duration_seconds",
     "The TLS handshake with the Egress, by session: full or resumed."},
    {"socks5", "kibotos_egress_socks5_duration_seconds",
     "The SOCKS5 exchange, from the greeting to the CONNECT reply."},
    {"dial", "kibotos_egress_dial_duration_seconds",
     "Whole successful dials, from the guest's connection to the relay's start."},
    {"first_byte", "kibotos_egress_first_byte_seconds",
     "From the guest's connection to the first byte the Egress sent it."},
};

// Per published Egress, every revision and Workspace together (bounded: one series set per Egress).
void timing_families(Writer& out, std::vector<EgressTimingMetrics> timings) {
  std::sort(timings.begin(), timings.end(), [](const auto& a, const auto& b) { return a.egress_id < b.egress_id; });
  out.family("kibotos_egress_up", "gauge",
             "1 when the newest probe of the Egress's server got a whole SOCKS5 exchange answered, else 0; only "
             "Egresses a Workspace uses are probed.");
  for (const auto& t : timings)
    if (t.probed) out.sample("kibotos_egress_up", "egress_id=\"" + escaped(t.egress_id) + "\"", t.up ? 1 : 0);
  out.family("kibotos_egress_probe_failures_total", "counter", "Probes of the Egress's server that failed.");
  for (const auto& t : timings)
    if (t.probed)
      out.sample("kibotos_egress_probe_failures_total", "egress_id=\"" + escaped(t.egress_id) + "\"", t.probe_failures);
  for (const StageFamily& f : kStageFamilies) {
    out.family(f.name, "histogram", f.help);
    for (const auto& t : timings)
      for (const auto& st : t.stages) {
        if (st.stage != f.stage) continue;
        std::string labels = "egress_id=\"" + escaped(t.egress_id) + "\"";
        if (!st.tls.empty()) labels += ",session=\"" + escaped(st.tls) + "\"";
        out.histogram(f.name, labels, st.histogram);
      }
  }
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
  dns_family(out, ws, "kibotos_dns_query_bytes_total", "counter",
             "DNS message bytes of the guest queries accepted (no TCP length prefix).", &DnsMetrics::query_bytes);
  dns_family(out, ws, "kibotos_dns_answer_bytes_total", "counter",
             "DNS message bytes of the answers delivered to the guest.", &DnsMetrics::answer_bytes);
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

std::string prometheus_text(const AgentTotals& totals, std::vector<WorkspaceMetrics> ws,
                            std::vector<EgressTimingMetrics> timings) {
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
  out.family("kibotos_access_log_lines_total", "counter", "Lines written to the access log (log.access).");
  out.sample("kibotos_access_log_lines_total", "", totals.connections.access_log_lines);
  out.family("kibotos_access_log_dropped_total", "counter",
             "Access log lines dropped: over log.access.max_lines_per_second, the writer behind, or a failed "
             "write.");
  out.sample("kibotos_access_log_dropped_total", "", totals.connections.access_log_dropped);
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
  accounting_families(out, ws);
  timing_families(out, std::move(timings));
  dns_families(out, ws);
  return out.take();
}

}  // namespace kib::api
