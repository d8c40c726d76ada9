#pragma once
// WorkspaceAttacher over netns::Attachment: the nftables TPROXY table, policy
// routing and transparent listeners of each Workspace namespace.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/dataplane/workspace_attacher.h"
#include "netns/attachment.h"
#include "netns/change_watch.h"

namespace kib::dataplane {

class NetnsAttacher final : public WorkspaceAttacher {
 public:
  // guest_congestion_control: config dataplane.guest_congestion_control (checked at
  // start by DataplaneRuntime::create). memo_path: where what the agent wrote in each
  // namespace is noted (netns/attach_memo.h), so that an agent started again adopts
  // what nobody touched since; empty: no memo, every start writes every table.
  explicit NetnsAttacher(std::string guest_congestion_control = {}, std::string memo_path = {});
  Result<WorkspaceListeners> attach(const std::string& workspace_id, const std::string& netns,
                                    const ::kibotos::ctrl::v1::NetworkPolicy& policy, unsigned tcp_listeners) override;
  Result<WorkspaceListeners> update(const std::string& workspace_id,
                                    const ::kibotos::ctrl::v1::NetworkPolicy& policy) override;
  void detach(const std::string& workspace_id) override;
  void release(const std::string& workspace_id) override;
  bool moved(const std::string& workspace_id) const override;
  Status remove_leftovers(const std::string& netns, uint64_t dev, uint64_t ino) override;
  std::string health(const std::string& workspace_id) const override;
  std::vector<std::string> enforced_families(const std::string& workspace_id) const override;
  void prepare(const std::vector<Runtime::Restoring>& all, unsigned tcp_listeners) override;
  void end_prepared() override;
  Repair repair(const std::string& workspace_id) override;
  std::optional<std::vector<std::pair<std::string, Repair>>> repairs_needed() override;
  Status attachable(uint64_t dev, uint64_t ino) const override;

 private:
  struct Entry;
  // The other Workspace attached to this namespace, or empty.
  std::string holder_of(const netns::NamespaceHandle& ns, const std::string& except) const;

  void forget(const std::string& workspace_id);  // under mu_
  // The Workspace's entry once no update() is writing its namespace (nullptr if
  // there is none). Waits on lk, which holds mu_.
  const Entry* settled(std::unique_lock<std::mutex>& lk, const std::string& workspace_id) const;
  Entry* settled(std::unique_lock<std::mutex>& lk, const std::string& workspace_id) {
    return const_cast<Entry*>(std::as_const(*this).settled(lk, workspace_id));
  }
  // A namespace prepare() adopted, waiting for its Workspace's attach().
  struct Prepared {
    netns::Attachment attachment;
    std::optional<netns::ChangeWatch> watch;  // nullopt: opened by attach()
    unsigned tcp_listeners = 0;
  };
  void prepare_one(const Runtime::Restoring& w, const netns::AttachNote& note, unsigned tcp_listeners);
  // The prepared attachment of this Workspace when it is for this namespace, policy
  // and listener count; else nullopt (and it is let go).
  std::optional<Prepared> claim_prepared(const std::string& workspace_id, const netns::NamespaceHandle& ns,
                                         const netns::RulesetPolicy& policy, unsigned tcp_listeners);
  // Notes what a restarted agent may adopt of this Entry, or drops its note. Under mu_.
  void note(const std::string& workspace_id, const Entry& e);
  void drop_note(const std::string& workspace_id);
  // Appends `line` to the memo (opened at the first note: by then the state dir is
  // locked, so no second agent started on it rewrites its memo); a failure is logged
  // when it changes, and the memo is rewritten whole at the next note.
  void write_memo(const std::function<Status(netns::AttachMemo&)>& line);
  // Moves what watches_ reported into reported_. Under mu_.
  void note_changes();

  struct Entry {
    netns::Attachment attachment;
    uint64_t key = 0;  // in watches_ and reported_; never reused
    // Checked at the next repair: nothing checked yet, a notification arrived, the
    // last check found something missing, or no watch (it could not be opened).
    bool changed = true;
    // The backstop sweep's next check even without a notification.
    std::chrono::steady_clock::time_point next_sweep;
    // The namespace's nftables generation when repair last found the table in place,
    // or right after the agent's own write (the table is then what it wrote).
    std::optional<uint32_t> checked_generation;
    // Only its nftables reported a change (the agent's own writes do): the generation
    // the report named, or a generation read, tells whether a check is needed at all.
    bool nft_reported = false;
    std::optional<uint32_t> reported_generation;
    // update() is writing its namespace outside mu_: nobody else uses the attachment
    // (or erases the entry) until it is done. Writes in different namespaces so run
    // at once (the nftables helpers serve two at a time).
    bool busy = false;
  };
  const std::string guest_congestion_control_;
  // The agent's own network namespace (st_dev, st_ino), never attached.
  std::optional<std::pair<uint64_t, uint64_t>> own_namespace_;
  std::mutex attach_mu_;  // held through attach(): see holder_of()
  mutable std::mutex mu_;
  mutable std::condition_variable settled_;  // an entry stopped being busy
  std::map<std::string, Entry> entries_;
  // nullopt when the epoll set could not be created: every namespace is then polled.
  std::optional<netns::ChangeWatchSet> watches_;
  // Reported by watches_, not yet checked, by key (the latest report's generation).
  std::unordered_map<uint64_t, netns::WatchReport> reported_;
  uint64_t next_key_ = 1;
  // The memo (see the constructor): its path, this boot, the notes the previous agent
  // left (used once, by prepare() at the start), those of this one.
  const std::string memo_path_;
  std::string boot_id_;
  netns::AttachNotes inherited_;
  netns::AttachNotes notes_;
  std::optional<netns::AttachMemo> memo_;
  std::map<std::string, Prepared> prepared_;
  bool memo_intact_ = false;  // false: rewrite it whole before the next line
  std::string memo_error_;    // the last write's, logged when it changes
};

}  // namespace kib::dataplane
