#pragma once
// WorkspaceAttacher over netns::Attachment: the nftables TPROXY table, policy
// routing and transparent listeners of each Workspace namespace.
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "agent/dataplane/workspace_attacher.h"
#include "netns/attachment.h"
#include "netns/change_watch.h"

namespace kib::dataplane {

class NetnsAttacher final : public WorkspaceAttacher {
 public:
  // guest_congestion_control: config dataplane.guest_congestion_control (checked at
  // start by DataplaneRuntime::create).
  explicit NetnsAttacher(std::string guest_congestion_control = {});
  Result<WorkspaceListeners> attach(const std::string& workspace_id, const std::string& netns,
                                    const ::kibotos::ctrl::v1::NetworkPolicy& policy,
                                    unsigned tcp_listeners) override;
  Result<WorkspaceListeners> update(const std::string& workspace_id,
                                    const ::kibotos::ctrl::v1::NetworkPolicy& policy) override;
  void detach(const std::string& workspace_id) override;
  void release(const std::string& workspace_id) override;
  bool moved(const std::string& workspace_id) const override;
  Status remove_leftovers(const std::string& netns, uint64_t dev, uint64_t ino) override;
  std::string health(const std::string& workspace_id) const override;
  std::vector<std::string> enforced_families(const std::string& workspace_id) const override;
  Repair repair(const std::string& workspace_id) override;
  std::optional<std::vector<std::pair<std::string, Repair>>> repairs_needed() override;
  Status attachable(uint64_t dev, uint64_t ino) const override;

 private:
  // The other Workspace attached to this namespace, or empty.
  std::string holder_of(const netns::NamespaceHandle& ns, const std::string& except) const;

  void forget(const std::string& workspace_id);  // under mu_
  // Moves what watches_ reported into changed_keys_. Under mu_.
  void note_changes();

  struct Entry {
    netns::Attachment attachment;
    uint64_t key = 0;  // in watches_ and changed_keys_; never reused
    // Checked at the next repair: nothing checked yet, a notification arrived, the
    // last check found something missing, or no watch (it could not be opened).
    bool changed = true;
    // The backstop sweep's next check even without a notification.
    std::chrono::steady_clock::time_point next_sweep;
    // The namespace's nftables generation when repair last found the table in place,
    // or right after the agent's own write (the table is then what it wrote).
    std::optional<uint32_t> checked_generation;
  };
  const std::string guest_congestion_control_;
  // The agent's own network namespace (st_dev, st_ino), never attached.
  std::optional<std::pair<uint64_t, uint64_t>> own_namespace_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  // nullopt when the epoll set could not be created: every namespace is then polled.
  std::optional<netns::ChangeWatchSet> watches_;
  std::unordered_set<uint64_t> changed_keys_;  // reported by watches_, not yet checked
  uint64_t next_key_ = 1;
};

}  // namespace kib::dataplane
