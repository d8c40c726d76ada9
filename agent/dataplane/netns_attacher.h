#pragma once
// WorkspaceAttacher over netns::Attachment: the nftables TPROXY table, policy
// routing and transparent listeners of each Workspace namespace.
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "agent/dataplane/workspace_attacher.h"
#include "netns/attachment.h"

namespace kib::dataplane {

class NetnsAttacher final : public WorkspaceAttacher {
 public:
  // guest_congestion_control: config dataplane.guest_congestion_control (checked at
  // start by DataplaneRuntime::create).
  explicit NetnsAttacher(std::string guest_congestion_control = {});
  Result<WorkspaceListeners> attach(const std::string& workspace_id, const std::string& netns,
                                    const ::kibotos::ctrl::v1::NetworkPolicy& policy, unsigned loops) override;
  Status update(const std::string& workspace_id, const ::kibotos::ctrl::v1::NetworkPolicy& policy) override;
  void detach(const std::string& workspace_id) override;
  void release(const std::string& workspace_id) override;
  bool moved(const std::string& workspace_id) const override;
  Status remove_leftovers(const std::string& netns, uint64_t dev, uint64_t ino) override;
  std::string health(const std::string& workspace_id) const override;
  Repair repair(const std::string& workspace_id) override;
  Status attachable(uint64_t dev, uint64_t ino) const override;

 private:
  // The other Workspace attached to this namespace, or empty.
  std::string holder_of(const netns::NamespaceHandle& ns, const std::string& except) const;

  struct Entry {
    netns::Attachment attachment;
    // The namespace's nftables generation when repair last found the table in place.
    std::optional<uint32_t> checked_generation;
  };
  const std::string guest_congestion_control_;
  // The agent's own network namespace (st_dev, st_ino), never attached.
  std::optional<std::pair<uint64_t, uint64_t>> own_namespace_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace kib::dataplane
