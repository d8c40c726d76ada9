#pragma once
// The agent's counters in the Prometheus text exposition format (version 0.0.4),
// served at GET /metrics beside the API.
#include <cstdint>
#include <string>
#include <vector>

#include "agent/runtime/runtime.h"

namespace kib::api {

struct AgentTotals {
  uint64_t workspaces = 0;  // stored, not deleted
  uint64_t egresses = 0;
  RuntimeCounts connections;
  double uptime_seconds = 0;
};

std::string prometheus_text(const AgentTotals& totals, std::vector<WorkspaceMetrics> workspaces,
                            std::vector<EgressTimingMetrics> timings = {});

}  // namespace kib::api
