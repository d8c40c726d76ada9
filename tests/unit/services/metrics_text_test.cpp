// prometheus_text: the text exposition format (0.0.4) of the agent's counters.
#include <doctest/doctest.h>

#include <sstream>

#include "agent/api/services/metrics_text.h"

using namespace kib;
using namespace kib::api;

namespace {

std::vector<WorkspaceMetrics> two_workspaces() {
  WorkspaceMetrics b;
  b.workspace_id = "ws-b";
  b.refused_over_limit = 5;
  b.refused_uncovered = 6;
  b.egresses.push_back(EgressMetrics{"eg-2",
                                     11,
                                     12,
                                     13,
                                     14,
                                     15,
                                     {{"guest_closed", 16}, {"dial_failed", 13}},
                                     {{"connect", 9}, {"refused", 4}},
                                     100,
                                     200});
  b.egresses.push_back(EgressMetrics{"eg-1", 21, 22, 23, 24, 25, {}, {}, 0, 0});
  WorkspaceMetrics a;
  a.workspace_id = "ws-a";
  return {b, a};
}

// Every line is a comment or `name{labels} value` with a number for value.
void check_well_formed(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    CAPTURE(line);
    REQUIRE_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    auto space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    CHECK(line.rfind("kibotos_", 0) == 0);
    std::size_t used = 0;
    (void)std::stod(line.substr(space + 1), &used);
    CHECK(used == line.size() - space - 1);
    ++samples;
  }
  CHECK(samples > 0);
  CHECK(text.back() == '\n');
}

// Whether `line` is a whole line of the text, after the first.
bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("metrics: totals, per-Egress counters and refusals, each under its own name and labels") {
  AgentTotals t;
  t.workspaces = 2;
  t.egresses = 3;
  t.connections = {7, 8};
  t.uptime_seconds = 12.5;
  const std::string text = prometheus_text(t, two_workspaces());
  check_well_formed(text);
  CHECK(has_line(text, "kibotos_uptime_seconds 12.500"));
  CHECK(has_line(text, "kibotos_workspaces 2"));
  CHECK(has_line(text, "kibotos_egresses 3"));
  CHECK(has_line(text, "kibotos_connections{state=\"active\"} 7"));
  CHECK(has_line(text, "kibotos_connections{state=\"draining\"} 8"));
  const std::string l = "{workspace_id=\"ws-b\",egress_id=\"eg-2\"}";
  CHECK(has_line(text, "kibotos_egress_active_connections" + l + " 11"));
  CHECK(has_line(text, "kibotos_egress_draining_connections" + l + " 12"));
  CHECK(has_line(text, "kibotos_egress_dial_failures_total" + l + " 13"));
  CHECK(has_line(text, "kibotos_egress_dial_refusals_total" + l + " 14"));
  CHECK(has_line(text, "kibotos_guest_connections_refused_total{workspace_id=\"ws-b\",reason=\"over_limit\"} 5"));
  CHECK(has_line(text, "kibotos_guest_connections_refused_total{workspace_id=\"ws-b\",reason=\"uncovered\"} 6"));
  CHECK(text.find("# TYPE kibotos_egress_dial_refusals_total counter\n") != std::string::npos);
  CHECK(text.find("# TYPE kibotos_connections gauge\n") != std::string::npos);
}

TEST_CASE("metrics: Workspaces and Egresses come sorted, so scrapes compare line by line") {
  const std::string text = prometheus_text(AgentTotals{}, two_workspaces());
  auto at = [&](const std::string& s) { return text.find(s); };
  CHECK(at("workspace_id=\"ws-a\",reason=\"over_limit\"") < at("workspace_id=\"ws-b\",reason=\"over_limit\""));
  CHECK(at("kibotos_egress_active_connections{workspace_id=\"ws-b\",egress_id=\"eg-1\"}") <
        at("kibotos_egress_active_connections{workspace_id=\"ws-b\",egress_id=\"eg-2\"}"));
}

TEST_CASE("metrics: a Workspace with resolvers has its DNS counters; one without has none") {
  auto ws = two_workspaces();
  ws[0].dns = DnsMetrics{31, 32, 33, 34, {{"timeout", 35}, {"inflight_cap", 36}}, 37, 38, 39};
  const std::string text = prometheus_text(AgentTotals{}, ws);
  check_well_formed(text);
  const std::string l = "{workspace_id=\"ws-b\"}";
  CHECK(has_line(text, "kibotos_dns_queries_total" + l + " 31"));
  CHECK(has_line(text, "kibotos_dns_answers_total" + l + " 32"));
  CHECK(has_line(text, "kibotos_dns_timeouts_total" + l + " 33"));
  CHECK(has_line(text, "kibotos_dns_failovers_total" + l + " 34"));
  CHECK(has_line(text, "kibotos_dns_in_flight" + l + " 37"));
  CHECK(has_line(text, "kibotos_dns_query_bytes_total" + l + " 38"));
  CHECK(has_line(text, "kibotos_dns_answer_bytes_total" + l + " 39"));
  CHECK(has_line(text, "kibotos_dns_failures_total{workspace_id=\"ws-b\",reason=\"timeout\"} 35"));
  CHECK(has_line(text, "kibotos_dns_failures_total{workspace_id=\"ws-b\",reason=\"inflight_cap\"} 36"));
  CHECK(text.find("# TYPE kibotos_dns_in_flight gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE kibotos_dns_queries_total counter\n") != std::string::npos);
  CHECK(text.find("kibotos_dns_queries_total{workspace_id=\"ws-a\"}") == std::string::npos);
}

TEST_CASE("metrics: a label value's backslash, quote and line feed are escaped") {
  WorkspaceMetrics w;
  w.workspace_id = "a\\b\"c\nd";
  const std::string text = prometheus_text(AgentTotals{}, {w});
  check_well_formed(text);
  CHECK(text.find("{workspace_id=\"a\\\\b\\\"c\\nd\",reason=\"uncovered\"} 0\n") != std::string::npos);
}

TEST_CASE("metrics: accounting per Workspace and Egress: opened, closed by reason, dial failures by cause, bytes") {
  const std::string text = prometheus_text(AgentTotals{}, two_workspaces());
  check_well_formed(text);
  const std::string l = "workspace_id=\"ws-b\",egress_id=\"eg-2\"";
  CHECK(has_line(text, "kibotos_egress_connections_opened_total{" + l + "} 15"));
  CHECK(has_line(text, "kibotos_egress_connections_closed_total{" + l + ",reason=\"guest_closed\"} 16"));
  CHECK(has_line(text, "kibotos_egress_connections_closed_total{" + l + ",reason=\"dial_failed\"} 13"));
  CHECK(has_line(text, "kibotos_egress_dial_failures_by_cause_total{" + l + ",cause=\"connect\"} 9"));
  CHECK(has_line(text, "kibotos_egress_dial_failures_by_cause_total{" + l + ",cause=\"refused\"} 4"));
  CHECK(has_line(text, "kibotos_egress_bytes_total{" + l + ",direction=\"from_guest\"} 100"));
  CHECK(has_line(text, "kibotos_egress_bytes_total{" + l + ",direction=\"to_guest\"} 200"));
  CHECK(text.find("# TYPE kibotos_egress_connections_closed_total counter\n") != std::string::npos);
}

TEST_CASE("metrics: dial stage histograms per Egress: cumulative buckets in seconds, +Inf, sum and count") {
  kib::LatencyHistogram h;
  h.observe_us(50);        // <= 100 us
  h.observe_us(300);       // <= 500 us
  h.observe_us(20000000);  // beyond 10 s: +Inf only
  EgressTimingMetrics t;
  t.egress_id = "eg-1";
  t.stages = {{"connect", "", h.snapshot()}, {"tls_handshake", "resumed", h.snapshot()}};
  const std::string text = prometheus_text(AgentTotals{}, {}, {t});
  check_well_formed(text);
  const std::string n = "kibotos_egress_connect_duration_seconds";
  CHECK(text.find("# TYPE " + n + " histogram\n") != std::string::npos);
  CHECK(has_line(text, n + "_bucket{egress_id=\"eg-1\",le=\"0.0001\"} 1"));
  CHECK(has_line(text, n + "_bucket{egress_id=\"eg-1\",le=\"0.00025\"} 1"));
  CHECK(has_line(text, n + "_bucket{egress_id=\"eg-1\",le=\"0.0005\"} 2"));
  CHECK(has_line(text, n + "_bucket{egress_id=\"eg-1\",le=\"10\"} 2"));
  CHECK(has_line(text, n + "_bucket{egress_id=\"eg-1\",le=\"+Inf\"} 3"));
  CHECK(has_line(text, n + "_sum{egress_id=\"eg-1\"} 20.000350"));
  CHECK(has_line(text, n + "_count{egress_id=\"eg-1\"} 3"));
  CHECK(
      has_line(text, "kibotos_egress_tls_handshake_duration_seconds_count{egress_id=\"eg-1\",session=\"resumed\"} 3"));
  // A stage an Egress has no snapshot for has no series (the family is still declared).
  CHECK(text.find("kibotos_egress_socks5_duration_seconds_count{") == std::string::npos);
}
