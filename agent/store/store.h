#pragma once
// The agent's durable state: one SQLite file under state_dir (WAL, group commit:
// see group_sync.h; mode 0600), guarded by an exclusive lock on the directory.
// Resources are protobuf blobs with indexed columns; the store does not know their
// types. Every access runs in one transaction on one connection, serialised by a
// mutex: a write RPC is one write transaction, its command-log row included.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/common/result.h"
#include "agent/store/group_sync.h"
#include "agent/store/sqlite_db.h"
#include "agent/store/state_dir_lock.h"

namespace kib::store {

enum class Kind { egress, workspace };

struct ResourceRow {
  uint64_t seq = 0;  // creation order
  std::string id;
  std::string body;
};

// A network namespace's identity: the nsfs inode.
struct NetnsKey {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const NetnsKey&) const = default;
};

// A deleted Workspace's namespace whose agent rules are not known to be removed yet.
struct PendingDetach {
  std::string workspace_id;
  std::string netns;  // the path it was attached by
  NetnsKey key;       // the namespace that path named then
};

// One Egress a Workspace policy names; udp when a udp Resolver goes through it.
struct EgressRef {
  std::string egress_id;
  bool udp = false;
};

// One command-log entry: what the first request with this command ID did.
struct CommandRecord {
  std::string command_id;
  std::string method;
  std::string fingerprint;  // raw SHA-256
  int code = 0;             // kib::Code; 0 = ok and response holds the reply
  std::string message;
  std::string response;  // serialized response message when code == 0
  int64_t created_ms = 0;
};

class Transaction {
 public:
  explicit Transaction(SqliteDb& db) : db_(db) {}

  // Non-deleted resources only: a deleted one is gone to every read.
  Result<std::optional<ResourceRow>> get(Kind kind, const std::string& id);
  // Non-deleted resources with seq > after_seq, in creation order, until fn says stop.
  Status scan(Kind kind, uint64_t after_seq, const std::function<bool(ResourceRow&&)>& fn);
  Result<uint64_t> count(Kind kind);
  // Returns the new row's seq.
  Result<uint64_t> insert(Kind kind, const std::string& id, std::string_view body,
                          std::optional<NetnsKey> netns = std::nullopt);
  Status update(Kind kind, const std::string& id, std::string_view body);
  // Keeps a tombstone (IDs are never reused) and drops the body's content.
  Status mark_deleted(Kind kind, const std::string& id);

  // Whether a non-deleted Workspace is attached to this namespace.
  Result<bool> netns_attached(const NetnsKey& key);
  // The identity of the namespace a non-deleted Workspace holds (or last held): the
  // one it was created with, until set_netns_key records another.
  Result<std::optional<NetnsKey>> netns_key(const std::string& workspace_id);
  // Records the namespace a Workspace's path named when it was attached again (after
  // a host reboot the path names a new namespace; the old identity may be reused).
  Status set_netns_key(const std::string& workspace_id, const NetnsKey& key);

  Status add_pending_detach(const PendingDetach& p);
  Status remove_pending_detach(const std::string& workspace_id);
  Result<std::vector<PendingDetach>> pending_detaches();
  // Replaces the Egresses a Workspace references (empty when it is deleted).
  Status set_refs(const std::string& workspace_id, const std::vector<EgressRef>& refs);
  // Whether a non-deleted Workspace references egress_id (through a udp Resolver only,
  // when udp_only).
  Result<bool> egress_referenced(const std::string& egress_id, bool udp_only);

  Result<std::optional<CommandRecord>> find_command(const std::string& command_id);
  Status record_command(const CommandRecord& rec);
  Status prune_commands(int64_t older_than_ms);

  // Runs fn inside a savepoint; on error, undoes what fn wrote and returns its error.
  Status savepoint(const std::function<Status()>& fn);

 private:
  SqliteDb& db_;
};

class Store {
 public:
  // Creates or opens <state_dir>/state.db, migrating it forward. failed_precondition
  // when another agent holds state_dir.
  static Result<std::unique_ptr<Store>> open(const std::string& state_dir);

  // One write transaction (BEGIN IMMEDIATE .. COMMIT, on disk when it returns):
  // committed when fn succeeds, rolled back when it fails.
  Status write(const std::function<Status(Transaction&)>& fn);
  // The same, split: the commit (visible to reads at once) returns its number, and
  // durable(number) must return before anything acknowledges it. Commits made
  // meanwhile share one fdatasync.
  Result<uint64_t> write_deferred(const std::function<Status(Transaction&)>& fn);
  Status durable(uint64_t commit) { return sync_.sync(commit); }
  // fdatasync calls of the WAL so far (tests).
  uint64_t syncs() const { return sync_.syncs(); }
  // One read transaction: a consistent snapshot.
  Status read(const std::function<Status(Transaction&)>& fn);

  // 32 random bytes generated once with the database: the page-token HMAC key.
  const std::string& page_token_secret() const { return secret_; }
  const std::string& path() const { return path_; }

 private:
  Store(StateDirLock lock, SqliteDb db, std::string path)
      : lock_(std::move(lock)), db_(std::move(db)), path_(std::move(path)), sync_(path_ + "-wal") {}
  // commit: set to the commit's number (GroupSync) when it committed.
  Status transact(const char* begin, const std::function<Status(Transaction&)>& fn, uint64_t* commit);
  Status load_secret();

  StateDirLock lock_;
  std::mutex mu_;
  SqliteDb db_;
  std::string path_;
  GroupSync sync_;
  std::string secret_;
};

// "<prefix><24 hex digits>" from the kernel's random source: opaque resource IDs.
std::string random_id(std::string_view prefix);
std::string random_bytes(size_t n);

}  // namespace kib::store
