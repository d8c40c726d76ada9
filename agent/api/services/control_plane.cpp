#include "agent/api/services/control_plane.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "agent/api/services/agent_service.h"
#include "agent/api/services/anchored_clock.h"
#include "agent/api/services/control_plane_options.h"
#include "agent/api/services/egress_service.h"
#include "agent/api/services/workspace_service.h"
#include "agent/policy/name_resolver.h"

namespace kib::api {
namespace {

class ControlPlaneImpl final : public ControlPlane {
 public:
  ControlPlaneImpl(std::unique_ptr<store::Store> store, Runtime& runtime, const Config& config, Clock clock,
                   Clock command_clock, ResolveFn resolve, policy::EndpointAddressPolicy address_policy,
                   std::chrono::milliseconds apply_retry_interval)
      : store_(std::move(store)),
        env_{*store_,
             runtime,
             config,
             clock,
             std::move(resolve),
             std::move(address_policy),
             CommandRunner(*store_, std::move(command_clock), config.commands_retention)},
        egresses_(env_),
        workspaces_(env_),
        agent_(env_) {
    if (apply_retry_interval.count() > 0)
      retry_ = std::thread([this, apply_retry_interval] { retry_loop(apply_retry_interval); });
  }

  ~ControlPlaneImpl() override {
    {
      std::lock_guard<std::mutex> g(retry_mu_);
      stopping_ = true;
    }
    retry_cv_.notify_all();
    if (retry_.joinable()) retry_.join();
  }

  void register_methods(MethodRegistry& registry) override {
    egresses_.register_methods(registry);
    workspaces_.register_methods(registry);
    agent_.register_methods(registry);
  }

  // Egresses first: every Workspace policy names Egresses the runtime must know.
  // A store read error leaves the rest unpublished; the data plane then fails closed.
  // In store order: a write that commits meanwhile is published after this.
  Result<std::string> metrics_text() override { return agent_.metrics_text(); }

  void publish_all() override {
    env_.commands.in_store_order([&] {
      if (egresses_.publish_all().ok()) (void)workspaces_.publish_all();
    });
  }

 private:
  void retry_loop(std::chrono::milliseconds interval) {
    std::unique_lock<std::mutex> lk(retry_mu_);
    while (!retry_cv_.wait_for(lk, interval, [this] { return stopping_; })) {
      lk.unlock();
      workspaces_.retry_failed_applies();
      workspaces_.reattach_moved();
      env_.runtime.workspaces_repaired();
      lk.lock();
    }
  }

  std::unique_ptr<store::Store> store_;
  ServiceEnv env_;
  EgressService egresses_;
  WorkspaceService workspaces_;
  AgentService agent_;
  std::mutex retry_mu_;
  std::condition_variable retry_cv_;
  bool stopping_ = false;
  std::thread retry_;  // last: stopped (in the destructor) before the services go
};

}  // namespace

Result<std::unique_ptr<ControlPlane>> open_control_plane(const Config& config, Runtime& runtime,
                                                         ControlPlaneOptions options) {
  auto address_policy = policy::EndpointAddressPolicy::from_strings(config.egress.allowed_special_purpose_cidrs);
  if (!address_policy.ok())
    return Error{Code::invalid_argument, "egress.allowed_special_purpose_cidrs: " + address_policy.error().message};
  KIB_TRY_ASSIGN(auto store, store::Store::open(config.state_dir));
  if (!options.command_clock)
    options.command_clock = options.clock ? options.clock
                                          : anchored_clock([] { return std::chrono::system_clock::now(); },
                                                           [] { return std::chrono::steady_clock::now(); });
  if (!options.clock) options.clock = [] { return std::chrono::system_clock::now(); };
  if (!options.resolve) {
    policy::ResolverOptions ro;
    ro.servers = config.egress.resolvers;
    ro.timeout = config.egress.resolve_timeout;
    options.resolve = [ro](const std::string& host) { return policy::resolve_host(host, ro); };
  }
  return std::unique_ptr<ControlPlane>(new ControlPlaneImpl(
      std::move(store), runtime, config, options.clock, std::move(options.command_clock), std::move(options.resolve),
      std::move(address_policy).value(), options.apply_retry_interval));
}

Result<std::unique_ptr<ControlPlane>> ControlPlane::open(const Config& config, Runtime& runtime) {
  return open_control_plane(config, runtime, {});
}

}  // namespace kib::api
