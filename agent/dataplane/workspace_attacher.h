#pragma once
// What the data plane needs from the namespace side (netns/): install interception
// for a Workspace and hand over its transparent listeners: TCP ones for the loops
// that accept its connections, DNS ones while its policy has resolvers.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/runtime/runtime.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::dataplane {

struct WorkspaceListeners {
  // Listening TCP sockets, as many per family as attach() was asked for; the i-th
  // of the Workspace's loops accepts on v4[i] and v6[i] (a missing index: it does
  // not accept on that family).
  std::vector<UniqueFd> v4;
  std::vector<UniqueFd> v6;
  // Intercepted DNS (UDP and TCP, both families), for the DNS service; empty when
  // the policy has no resolvers.
  std::vector<UniqueFd> dns_udp;
  std::vector<UniqueFd> dns_tcp;
  // The namespace, shared with the attacher (no second fd), where the DNS service
  // opens its reply sockets; set along with DNS listeners.
  std::shared_ptr<const UniqueFd> netns;
};

class WorkspaceAttacher {
 public:
  virtual ~WorkspaceAttacher() = default;
  // First time for a Workspace: install the rules and open the listeners
  // (tcp_listeners per family).
  virtual Result<WorkspaceListeners> attach(const std::string& workspace_id, const std::string& netns,
                                            const ::kibotos::ctrl::v1::NetworkPolicy& policy,
                                            unsigned tcp_listeners) = 0;
  // At a start (Runtime::workspaces_restoring): attach() is about to be called for
  // each of these, with tcp_listeners. What can be done for them in parallel is
  // done now and claimed by their attach(); end_prepared() lets go of the rest.
  virtual void prepare(const std::vector<Runtime::Restoring>& /*all*/, unsigned /*tcp_listeners*/) {}
  virtual void end_prepared() {}
  // The policy changed: replace the rules. The TCP listeners stay; DNS ones are
  // opened (and returned) when the policy gains resolvers. When it loses them the
  // rules stop pointing at the DNS listeners, which the caller then closes.
  virtual Result<WorkspaceListeners> update(const std::string& workspace_id,
                                            const ::kibotos::ctrl::v1::NetworkPolicy& policy) = 0;
  // Removes everything installed for the Workspace.
  virtual void detach(const std::string& workspace_id) = 0;
  // Forgets the Workspace's namespace, leaving what was installed there.
  virtual void release(const std::string& /*workspace_id*/) {}
  // Whether the Workspace's path no longer names the namespace it was attached in.
  virtual bool moved(const std::string& /*workspace_id*/) const { return false; }
  // Runtime::leftovers_removed, for a namespace no Workspace holds.
  virtual Status remove_leftovers(const std::string& /*netns*/, uint64_t /*dev*/, uint64_t /*ino*/) { return {}; }
  // Empty while the namespace and its rules are intact, else why not.
  virtual std::string health(const std::string& /*workspace_id*/) const { return {}; }
  // The address families enforced in the Workspace's namespace ("ipv4", "ipv6"):
  // those it carries, as far as the agent could install them.
  virtual std::vector<std::string> enforced_families(const std::string& /*workspace_id*/) const { return {}; }
  // Puts back the Workspace's rules where the kernel no longer has them as installed
  // (removed or changed behind the agent's back: `nft flush ruleset`, a firewall
  // reload, a rule inserted into the table). Empty when nothing was missing, or the
  // namespace is gone (moved() covers that).
  struct Repair {
    std::string missing;    // what check found missing or changed
    Status reinstalled;     // whether putting it back worked
    std::string unchecked;  // why the check could not run (the agent is out of fds): retried
  };
  virtual Repair repair(const std::string& /*workspace_id*/) { return {}; }
  // repair() of the Workspaces that may need it (a change reported in their namespace,
  // a failed repair, a backstop sweep due), as (workspace id, repair()'s answer) for
  // each one looked at; one not listed was intact at its last check. nullopt: the
  // attacher cannot tell, so repair() is called for every Workspace.
  virtual std::optional<std::vector<std::pair<std::string, Repair>>> repairs_needed() { return std::nullopt; }
  // Runtime::workspace_attachable; attach() refuses what this refuses.
  virtual Status attachable(uint64_t /*dev*/, uint64_t /*ino*/) const { return {}; }
};

}  // namespace kib::dataplane
