#pragma once
// A Runtime for builds and tests without a data plane: it enforces nothing, so it
// refuses every Workspace rather than pretend to protect one. Egress publications
// are accepted (the store remains the truth; nothing dials).
#include "agent/runtime/runtime.h"

namespace kib {

class InertRuntime final : public Runtime {
 public:
  void egress_published(EgressRevisionPtr, uint32_t) override {}
  void egress_deleted(const std::string&) override {}
  Status workspace_applied(const std::string&, const std::string&, const ctrl::NetworkPolicy&, uint32_t) override {
    return Error{Code::unimplemented, "this agent runs without a data plane: workspaces cannot be enforced"};
  }
  void workspace_deleted(const std::string&) override {}
  ctrl::NetworkPolicyStatus workspace_status(const std::string&) const override {
    ctrl::NetworkPolicyStatus s;
    s.set_error("no data plane");
    return s;
  }
  RuntimeCounts counts() const override { return {}; }
};

}  // namespace kib
