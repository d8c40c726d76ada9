#pragma once
// What the service tests share: a temporary state dir, a Runtime that records what
// the services tell it, a fake clock and resolver, and a ControlPlane opened on a
// real SQLite file, called through the MethodRegistry the daemon serves.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/api/connect/method_registry.h"
#include "agent/api/services/anchored_clock.h"
#include "agent/api/services/control_plane_options.h"
#include "agent/runtime/runtime.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::test {

namespace ctrl = ::kibotos::ctrl::v1;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kibotos-unit-XXXXXX";
    char* p = ::mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Records every call, in order, as a short line; keeps the last EgressRevision.
// before_record, when set, runs first with the line (a test holds a call there).
class RecordingRuntime final : public Runtime {
 public:
  void egress_published(EgressRevisionPtr rev, uint32_t drain_seconds) override {
    std::string e = "egress_published " + rev->egress_id + " r" + std::to_string(rev->revision) + " drain " +
                    std::to_string(drain_seconds);
    if (before_record) before_record(e);
    std::lock_guard<std::mutex> g(mu_);
    events_.push_back(std::move(e));
    last_published_ = rev;
  }
  void egress_deleted(const std::string& id) override { record("egress_deleted " + id); }
  Status workspace_applied(const std::string& id, const std::string& netns, const ctrl::NetworkPolicy& policy,
                           uint32_t drain_seconds) override {
    record("workspace_applied " + id + " " + netns + " r" + std::to_string(policy.revision()) + " drain " +
           std::to_string(drain_seconds));
    std::lock_guard<std::mutex> g(mu_);
    if (!fail_apply_.empty()) return Error{Code::internal, fail_apply_};
    applied_[id] = policy.revision();
    return {};
  }
  void workspace_deleted(const std::string& id) override {
    record("workspace_deleted " + id);
    std::lock_guard<std::mutex> g(mu_);
    applied_.erase(id);
  }
  Status leftovers_removed(const std::string& netns, uint64_t dev, uint64_t ino) override {
    record("leftovers_removed " + netns + " " + std::to_string(dev) + ":" + std::to_string(ino));
    std::lock_guard<std::mutex> g(mu_);
    if (!fail_leftovers_.empty()) return Error{Code::internal, fail_leftovers_};
    return {};
  }
  std::vector<std::string> workspaces_moved() const override {
    std::lock_guard<std::mutex> g(mu_);
    return moved_;
  }
  void workspace_released(const std::string& id) override {
    record("workspace_released " + id);
    std::lock_guard<std::mutex> g(mu_);
    applied_.erase(id);
    std::erase(moved_, id);
  }
  ctrl::NetworkPolicyStatus workspace_status(const std::string& id) const override {
    std::lock_guard<std::mutex> g(mu_);
    ctrl::NetworkPolicyStatus s;
    auto it = applied_.find(id);
    if (it != applied_.end())
      s.set_applied_revision(it->second);
    else
      s.set_error("workspace is not attached");  // as the data plane says
    return s;
  }
  RuntimeCounts counts() const override { return {7, 3}; }
  Status workspace_attachable(uint64_t dev, uint64_t ino) const override {
    if (refused_namespace == store::NetnsKey{dev, ino}) return Error{Code::failed_precondition, "is refused"};
    return {};
  }
  std::optional<store::NetnsKey> refused_namespace;  // as the data plane refuses its own

  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> g(mu_);
    return events_;
  }
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    events_.clear();
  }
  std::function<void(const std::string&)> before_record;

  EgressRevisionPtr last_published() const {
    std::lock_guard<std::mutex> g(mu_);
    return last_published_;
  }
  void fail_workspace_apply(std::string message) {
    std::lock_guard<std::mutex> g(mu_);
    fail_apply_ = std::move(message);
  }
  // The Workspaces whose path names another namespace now, until released.
  void set_moved(std::vector<std::string> ids) {
    std::lock_guard<std::mutex> g(mu_);
    moved_ = std::move(ids);
  }
  void fail_leftovers(std::string message) {
    std::lock_guard<std::mutex> g(mu_);
    fail_leftovers_ = std::move(message);
  }

 private:
  void record(std::string e) {
    if (before_record) before_record(e);
    std::lock_guard<std::mutex> g(mu_);
    events_.push_back(std::move(e));
  }
  mutable std::mutex mu_;
  std::vector<std::string> events_;
  EgressRevisionPtr last_published_;
  std::map<std::string, uint64_t> applied_;
  std::string fail_apply_;
  std::string fail_leftovers_;
  std::vector<std::string> moved_;
};

// A fake name service: host -> addresses, and an optional hook run inside resolve
// (to hold a request in flight).
struct FakeResolver {
  std::map<std::string, std::vector<std::string>> names = {
      {"proxy.example", {"203.0.113.7"}},
      {"v6proxy.example", {"2001:4860::1"}},
      {"mixed.example", {"203.0.113.8", "10.1.2.3"}},
      {"loopback.example", {"::1"}},
  };
  std::atomic<int> calls{0};
  std::function<void(const std::string&)> hook;

  Result<std::vector<policy::IpAddress>> resolve(const std::string& host) {
    ++calls;
    if (hook) hook(host);
    std::vector<policy::IpAddress> out;
    auto it = names.find(host);
    if (it == names.end()) return out;
    for (const auto& a : it->second) out.push_back(*policy::IpAddress::parse(a));
    return out;
  }
};

class Harness {
 public:
  explicit Harness(bool real_resolver = false) : real_resolver_(real_resolver) {
    config.state_dir = dir.path() + "/state";
    // Tests reach "endpoints" in TEST-NET-3 (203.0.113.0/24) through the exemption.
    config.egress.allowed_special_purpose_cidrs = {"203.0.113.0/24"};
    now = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
    open();
  }

  void open() {
    api::ControlPlaneOptions o;
    o.apply_retry_interval = apply_retry;
    o.clock = [this] {
      std::lock_guard<std::mutex> g(clock_mu_);
      return now;
    };
    if (step_proof_commands)
      o.command_clock = api::anchored_clock(o.clock, [this] {
        std::lock_guard<std::mutex> g(clock_mu_);
        return steady;
      });
    if (!real_resolver_) o.resolve = [this](const std::string& h) { return resolver.resolve(h); };
    auto cp = api::open_control_plane(config, runtime, o);
    REQUIRE_MESSAGE(cp.ok(), (cp.ok() ? "" : cp.error().message));
    plane = std::move(cp).value();
    registry = api::MethodRegistry();
    plane->register_methods(registry);
  }
  // Like an agent restart: close the store, open it again.
  void reopen() {
    plane.reset();
    open();
  }
  // A whole agent restart: the store reopened, then everything published again (the
  // runtime's record starts empty there).
  void restart() {
    reopen();
    runtime.clear();
    plane->publish_all();
  }
  // Steps the system clock only (also back, with a negative d).
  void advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> g(clock_mu_);
    now += d;
  }
  // Real time passing: the system clock and the steady one.
  void elapse(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> g(clock_mu_);
    now += d;
    steady += d;
  }

  template <typename Resp, typename Req>
  Result<Resp> call(const std::string& method, const Req& req) {
    const api::Method* m = registry.find(method);
    if (!m) return Error{Code::unimplemented, method};
    auto r = m->call(req, api::CallContext{});
    if (!r.ok()) return std::move(r).error();
    return Resp(static_cast<const Resp&>(**r));
  }

  // Off by default: tests that count runtime calls see only their own.
  std::chrono::milliseconds apply_retry{0};

  std::string next_command_id() { return "cmd-" + std::to_string(++commands_); }

  // Shorthands for the Egress RPCs.
  Result<ctrl::CreateEgressResponse> create_egress(const ctrl::EgressSpec& spec) {
    ctrl::CreateEgressRequest r;
    r.set_command_id(next_command_id());
    *r.mutable_spec() = spec;
    return call<ctrl::CreateEgressResponse>("kibotos.ctrl.v1.EgressService/CreateEgress", r);
  }
  Result<ctrl::CreateEgressResponse> create(const ctrl::CreateEgressRequest& r) {
    return call<ctrl::CreateEgressResponse>("kibotos.ctrl.v1.EgressService/CreateEgress", r);
  }
  Result<ctrl::GetEgressResponse> get_egress(const std::string& id) {
    ctrl::GetEgressRequest r;
    r.set_egress_id(id);
    return call<ctrl::GetEgressResponse>("kibotos.ctrl.v1.EgressService/GetEgress", r);
  }
  Result<ctrl::ListEgressesResponse> list(const ctrl::ListEgressesRequest& r) {
    return call<ctrl::ListEgressesResponse>("kibotos.ctrl.v1.EgressService/ListEgresses", r);
  }
  Result<ctrl::UpdateEgressResponse> update(const ctrl::UpdateEgressRequest& r) {
    return call<ctrl::UpdateEgressResponse>("kibotos.ctrl.v1.EgressService/UpdateEgress", r);
  }
  Result<ctrl::UpdateEgressResponse> update_egress(const std::string& id, uint64_t expected,
                                                   const ctrl::EgressSpec& spec) {
    ctrl::UpdateEgressRequest r;
    r.set_command_id(next_command_id());
    r.set_egress_id(id);
    r.set_expected_revision(expected);
    *r.mutable_spec() = spec;
    return update(r);
  }
  Result<ctrl::DeleteEgressResponse> delete_egress(const std::string& id) {
    ctrl::DeleteEgressRequest r;
    r.set_command_id(next_command_id());
    r.set_egress_id(id);
    return call<ctrl::DeleteEgressResponse>("kibotos.ctrl.v1.EgressService/DeleteEgress", r);
  }
  Result<ctrl::UpdateEgressLabelsResponse> labels(const ctrl::UpdateEgressLabelsRequest& r) {
    return call<ctrl::UpdateEgressLabelsResponse>("kibotos.ctrl.v1.EgressService/UpdateEgressLabels", r);
  }
  Result<ctrl::UpdateEgressAnnotationsResponse> annotations(const ctrl::UpdateEgressAnnotationsRequest& r) {
    return call<ctrl::UpdateEgressAnnotationsResponse>("kibotos.ctrl.v1.EgressService/UpdateEgressAnnotations", r);
  }

  // Workspaces.
  Result<ctrl::CreateWorkspaceResponse> create_workspace(const std::string& netns, const ctrl::NetworkPolicy& p) {
    ctrl::CreateWorkspaceRequest r;
    r.set_command_id(next_command_id());
    r.set_netns(netns);
    *r.mutable_network_policy() = p;
    return call<ctrl::CreateWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", r);
  }
  Result<ctrl::GetWorkspaceResponse> get_workspace(const std::string& id) {
    ctrl::GetWorkspaceRequest r;
    r.set_workspace_id(id);
    return call<ctrl::GetWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/GetWorkspace", r);
  }
  Result<ctrl::UpdateWorkspaceLabelsResponse> workspace_labels(const ctrl::UpdateWorkspaceLabelsRequest& r) {
    return call<ctrl::UpdateWorkspaceLabelsResponse>("kibotos.ctrl.v1.WorkspaceService/UpdateWorkspaceLabels", r);
  }
  Result<ctrl::UpdateWorkspaceAnnotationsResponse> workspace_annotations(
      const ctrl::UpdateWorkspaceAnnotationsRequest& r) {
    return call<ctrl::UpdateWorkspaceAnnotationsResponse>("kibotos.ctrl.v1.WorkspaceService/UpdateWorkspaceAnnotations",
                                                          r);
  }
  Result<ctrl::UpdateNetworkPolicyResponse> update_policy(const std::string& id, uint64_t expected,
                                                          const ctrl::NetworkPolicy& p) {
    ctrl::UpdateNetworkPolicyRequest r;
    r.set_command_id(next_command_id());
    r.set_workspace_id(id);
    r.set_expected_revision(expected);
    *r.mutable_network_policy() = p;
    return call<ctrl::UpdateNetworkPolicyResponse>("kibotos.ctrl.v1.WorkspaceService/UpdateNetworkPolicy", r);
  }
  Result<ctrl::DeleteWorkspaceResponse> delete_workspace(const std::string& id) {
    ctrl::DeleteWorkspaceRequest r;
    r.set_command_id(next_command_id());
    r.set_workspace_id(id);
    return call<ctrl::DeleteWorkspaceResponse>("kibotos.ctrl.v1.WorkspaceService/DeleteWorkspace", r);
  }

  TempDir dir;
  Config config;
  RecordingRuntime runtime;
  FakeResolver resolver;
  std::chrono::system_clock::time_point now;
  std::chrono::steady_clock::time_point steady;
  // Command IDs timed as in the agent (anchored_clock.h): steps of `now` do not move
  // them, elapse() does. Otherwise they follow `now`. Takes effect at (re)open.
  bool step_proof_commands = false;
  std::unique_ptr<api::ControlPlane> plane;
  api::MethodRegistry registry;

 private:
  bool real_resolver_;
  std::mutex clock_mu_;
  std::atomic<int> commands_{0};  // tests call from several threads
};

inline ctrl::EgressSpec socks5(const std::string& address, const std::string& user = "", const std::string& pass = "") {
  ctrl::EgressSpec s;
  s.mutable_socks5()->set_address(address);
  s.mutable_socks5()->set_username(user);
  s.mutable_socks5()->set_password(pass);
  return s;
}

inline Code code_of(const Status& s) { return s.ok() ? Code::ok : s.error().code; }
template <typename T>
Code code_of(const Result<T>& r) {
  return r.ok() ? Code::ok : r.error().code;
}

}  // namespace kib::test

// doctest prints Codes by name.
namespace doctest {
template <>
struct StringMaker<kib::Code> {
  static String convert(kib::Code c) { return String(std::string(kib::code_name(c)).c_str()); }
};
}  // namespace doctest
