#pragma once
// The guest DNS of every Workspace, on one io_uring loop thread of its own (DNS is a
// trickle next to the relayed TCP; keeping it apart keeps the workers' loops free of
// it). Thread-safe entry points, called by the data-plane runtime after the store has
// committed, mirroring kib::Runtime.
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/dns/dns_status.h"
#include "agent/dns/workspace_dns.h"
#include "agent/policy/name_resolver.h"
#include "agent/policy/special_purpose.h"
#include "agent/relay/dial_target.h"
#include "kibotos/ctrl/v1/workspace.pb.h"
#include "netns/attachment.h"
#include "uring/loop.h"

namespace kib::dns {

struct DnsServiceOptions {
  WorkspaceDnsOptions workspace;
  uint64_t handshake_ms = 10000;
  // For Egress hostnames when start() gets no resolve function (config's
  // egress.resolvers and resolve_timeout).
  policy::ResolverOptions resolver;
};

// The DNS listeners netns opened for a Workspace (netns::Listeners::dns_udp and
// dns_tcp, every fd of both families).
struct DnsListeners {
  std::vector<UniqueFd> udp;
  std::vector<UniqueFd> tcp;
};

// Resolves an Egress host off the loop (c-ares); the callback may run on any thread.
// Empty: policy::resolve_host on a short-lived thread per lookup (one per channel set
// up through an Egress named by hostname; channels are few and long-lived).
using AnyThreadResolve = std::function<void(const std::string& host, ResolveCallback cb)>;

class DnsService {
 public:
  static Result<std::unique_ptr<DnsService>> start(const DnsServiceOptions& options,
                                                   policy::EndpointAddressPolicy address_policy,
                                                   AnyThreadResolve resolve);
  // Closes everything and joins the thread.
  ~DnsService();
  DnsService(const DnsService&) = delete;
  DnsService& operator=(const DnsService&) = delete;

  // A new revision of an Egress: new queries use it at once; channels of older
  // revisions drain.
  void publish_egress(relay::DialTargetPtr target, uint32_t drain_seconds);
  // Channels through it close at once.
  void delete_egress(const std::string& egress_id);
  // A Workspace's policy. The call that brings its DNS listeners (the first with
  // resolvers) passes its namespace too (shared with its holder, for the reply
  // sockets); later calls pass neither. A policy without resolvers keeps nothing:
  // what the workspace had (listeners included) closes, so the caller sends it once
  // the namespace's rules no longer point at those listeners.
  // invalid_argument for a resolver address that is not ip:port.
  Status apply_workspace(const std::string& workspace_id, std::shared_ptr<const UniqueFd> netns,
                         const ::kibotos::ctrl::v1::NetworkPolicy& policy, DnsListeners listeners);
  // The same with the namespace given by path (opened here, for the reply sockets).
  Status apply_workspace_at(const std::string& workspace_id, const std::string& netns_path,
                            const ::kibotos::ctrl::v1::NetworkPolicy& policy, DnsListeners listeners);
  void remove_workspace(const std::string& workspace_id);
  // Take-over: closes every Workspace's guest listeners (WorkspaceDns::close_listeners).
  void stop_accepting();
  // What the DNS of a workspace is doing now (waits for the loop, at most 1 s).
  std::optional<WorkspaceDnsStatus> status(const std::string& workspace_id) const;
  // Every workspace's, in one wait (empty when the loop does not answer within 1 s).
  std::map<std::string, WorkspaceDnsStatus> statuses() const;

 private:
  struct Engine;
  DnsService() = default;
  void thread_main(std::shared_ptr<std::promise<Status>> ready);

  DnsServiceOptions options_;
  std::unique_ptr<Engine> engine_;
  uring::Loop* loop_ = nullptr;
  std::thread thread_;
};

// The DNS sockets of an attachment (NetnsAttacher::take_dns_listeners), every fd of
// both families.
DnsListeners dns_listeners_from(netns::Listeners&& listeners);

}  // namespace kib::dns
