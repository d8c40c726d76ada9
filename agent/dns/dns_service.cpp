#include "agent/dns/dns_service.h"

#include <unistd.h>

#include <chrono>

#include "netns/namespace_handle.h"
#include "netns/transparent_listener.h"

namespace kib::dns {

struct DnsService::Engine {
  Engine(uring::Loop& loop, const DnsServiceOptions& options, policy::EndpointAddressPolicy addr,
         AnyThreadResolve resolve)
      : options(options),
        address_policy(std::move(addr)),
        any_thread_resolve(std::move(resolve)),
        ctx{loop, address_policy, {}, options.handshake_ms, &live} {
    // Streams want their resolution back on the loop thread.
    ctx.resolve = [this](const std::string& host, ResolveCallback cb) {
      auto shared_cb = std::make_shared<ResolveCallback>(std::move(cb));
      uring::Loop* l = &ctx.loop;
      any_thread_resolve(host, [l, shared_cb](Result<std::vector<policy::IpAddress>> r) {
        auto result = std::make_shared<Result<std::vector<policy::IpAddress>>>(std::move(r));
        l->post([shared_cb, result] { (*shared_cb)(std::move(*result)); });
      });
    };
  }

  struct Workspace {
    std::shared_ptr<const UniqueFd> netns;
    std::unique_ptr<WorkspaceDns> dns;
  };

  DnsServiceOptions options;
  policy::EndpointAddressPolicy address_policy;
  AnyThreadResolve any_thread_resolve;
  size_t live = 0;
  StreamContext ctx;
  std::unordered_map<std::string, relay::DialTargetPtr> egresses;
  std::unordered_map<std::string, Workspace> workspaces;

  relay::DialTargetPtr egress(const std::string& id) const {
    auto it = egresses.find(id);
    return it == egresses.end() ? nullptr : it->second;
  }
};

Result<std::unique_ptr<DnsService>> DnsService::start(const DnsServiceOptions& options,
                                                      policy::EndpointAddressPolicy address_policy,
                                                      AnyThreadResolve resolve) {
  std::unique_ptr<DnsService> s(new DnsService());
  s->options_ = options;
  auto ready = std::make_shared<std::promise<Status>>();
  auto ready_future = ready->get_future();
  // The engine is built on the loop thread (the ring is single-issuer).
  auto addr = std::make_shared<policy::EndpointAddressPolicy>(std::move(address_policy));
  if (!resolve) {
    resolve = [ro = options.resolver](const std::string& host, ResolveCallback cb) {
      std::thread([ro, host, cb] { cb(policy::resolve_host(host, ro)); }).detach();
    };
  }
  auto res = std::make_shared<AnyThreadResolve>(std::move(resolve));
  DnsService* raw = s.get();
  s->thread_ = std::thread([raw, ready, addr, res] {
    uring::LoopOptions lo;
    lo.sq_entries = 512;
    lo.buffer_count = 16;  // the DNS loop reads into its own buffers
    lo.buffer_size = 4096;
    auto loop = uring::Loop::create(lo);
    if (!loop.ok()) {
      ready->set_value(std::move(loop).error());
      return;
    }
    raw->engine_ = std::make_unique<Engine>(**loop, raw->options_, *addr, *res);
    raw->loop_ = loop->get();
    ready->set_value(Status{});
    Engine* engine = raw->engine_.get();
    (*loop)->run([engine] { return engine->live == 0; });
    raw->engine_.reset();
  });
  Status st = ready_future.get();
  if (!st.ok()) {
    s->thread_.join();
    return std::move(st).error();
  }
  return s;
}

DnsService::~DnsService() {
  if (loop_ != nullptr) {
    Engine* e = engine_.get();
    uring::Loop* l = loop_;
    loop_->post([e, l] {
      e->workspaces.clear();  // closes every socket; the loop runs until they are gone
      e->egresses.clear();
      l->request_stop();
    });
  }
  if (thread_.joinable()) thread_.join();
}

void DnsService::publish_egress(relay::DialTargetPtr target, uint32_t drain_seconds) {
  Engine* e = engine_.get();
  loop_->post([e, target, drain_seconds] {
    e->egresses[target->egress_id()] = target;
    for (auto& [id, ws] : e->workspaces) ws.dns->egress_published(target->egress_id(), drain_seconds);
  });
}

void DnsService::delete_egress(const std::string& egress_id) {
  Engine* e = engine_.get();
  loop_->post([e, egress_id] {
    e->egresses.erase(egress_id);
    for (auto& [id, ws] : e->workspaces) ws.dns->egress_deleted(egress_id);
  });
}

Status DnsService::apply_workspace(const std::string& workspace_id, std::shared_ptr<const UniqueFd> ns,
                                   const ::kibotos::ctrl::v1::NetworkPolicy& policy, DnsListeners listeners) {
  KIB_TRY_ASSIGN(auto routes, resolver_routes(policy));
  auto shared_listeners = std::make_shared<DnsListeners>(std::move(listeners));
  auto shared_routes = std::make_shared<std::vector<ResolverRoute>>(std::move(routes));
  Engine* e = engine_.get();
  const uint64_t revision = policy.revision();
  loop_->post([e, workspace_id, ns, shared_listeners, shared_routes, revision] {
    auto it = e->workspaces.find(workspace_id);
    if (shared_routes->empty()) {
      // No resolvers: nothing to serve, and the rules no longer reach the listeners.
      if (it != e->workspaces.end()) e->workspaces.erase(it);
      return;
    }
    if (it == e->workspaces.end()) {
      if (!ns) return;  // never given listeners: nothing to serve
      Engine::Workspace ws;
      ws.netns = ns;
      std::shared_ptr<const UniqueFd> ns_for_replies = ns;
      auto opener = [ns_for_replies](const SocketAddress& asked) -> Result<UniqueFd> {
        return netns::open_transparent_reply_socket(ns_for_replies->get(), &asked.sa, asked.length());
      };
      ws.dns = std::make_unique<WorkspaceDns>(
          e->ctx, [e](const std::string& id) { return e->egress(id); }, opener, e->options.workspace, revision,
          *shared_routes);
      it = e->workspaces.emplace(workspace_id, std::move(ws)).first;
    } else {
      it->second.dns->set_resolvers(revision, *shared_routes);
    }
    for (auto& fd : shared_listeners->udp) it->second.dns->add_udp_listener(std::move(fd));
    for (auto& fd : shared_listeners->tcp) it->second.dns->add_tcp_listener(std::move(fd));
  });
  return {};
}

Status DnsService::apply_workspace_at(const std::string& workspace_id, const std::string& netns_path,
                                      const ::kibotos::ctrl::v1::NetworkPolicy& policy, DnsListeners listeners) {
  if (listeners.udp.empty() && listeners.tcp.empty()) return apply_workspace(workspace_id, nullptr, policy, {});
  KIB_TRY_ASSIGN(auto ns, netns::NamespaceHandle::open(netns_path));
  return apply_workspace(workspace_id, ns.shared_fd(), policy, std::move(listeners));
}

DnsListeners dns_listeners_from(netns::Listeners&& l) {
  DnsListeners out;
  for (auto* set : {&l.dns_udp.v4, &l.dns_udp.v6})
    for (auto& fd : *set) out.udp.push_back(std::move(fd));
  for (auto* set : {&l.dns_tcp.v4, &l.dns_tcp.v6})
    for (auto& fd : *set) out.tcp.push_back(std::move(fd));
  return out;
}

void DnsService::stop_accepting() {
  Engine* e = engine_.get();
  loop_->post([e] {
    for (auto& [id, ws] : e->workspaces) ws.dns->close_listeners();
  });
}

void DnsService::remove_workspace(const std::string& workspace_id) {
  Engine* e = engine_.get();
  loop_->post([e, workspace_id] { e->workspaces.erase(workspace_id); });
}

namespace {

// Runs fn(engine) on the DNS loop and waits for its result, at most 1 s (nullopt then).
template <class Engine, class Fn>
auto ask_loop(uring::Loop& loop, Engine* e, Fn fn) -> std::optional<decltype(fn(*e))> {
  using T = decltype(fn(*e));
  auto result = std::make_shared<std::promise<T>>();
  auto fut = result->get_future();
  loop.post([e, result, fn] { result->set_value(fn(*e)); });
  if (fut.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
  return fut.get();
}

}  // namespace

std::optional<WorkspaceDnsStatus> DnsService::status(const std::string& workspace_id) const {
  auto r = ask_loop(*loop_, engine_.get(), [workspace_id](Engine& e) -> std::optional<WorkspaceDnsStatus> {
    auto it = e.workspaces.find(workspace_id);
    if (it == e.workspaces.end()) return std::nullopt;
    return it->second.dns->status();
  });
  return r ? std::move(*r) : std::nullopt;
}

std::map<std::string, WorkspaceDnsStatus> DnsService::statuses() const {
  auto r = ask_loop(*loop_, engine_.get(), [](Engine& e) {
    std::map<std::string, WorkspaceDnsStatus> all;
    for (const auto& [id, w] : e.workspaces) all.emplace(id, w.dns->status());
    return all;
  });
  return r ? std::move(*r) : std::map<std::string, WorkspaceDnsStatus>{};
}

}  // namespace kib::dns
