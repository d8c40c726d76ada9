#include "agent/store/schema_migrations.h"

#include <chrono>
#include <string>
#include <vector>

namespace kib::store {
namespace {

// Never edit a step once released: add a new one.
const std::vector<std::string>& steps() {
  static const std::vector<std::string> k = {
      // 1: resources (protobuf blobs with indexed columns), the command log, meta.
      R"sql(
        CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
        CREATE TABLE resources(
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          kind TEXT NOT NULL,
          id TEXT NOT NULL UNIQUE,
          deleted INTEGER NOT NULL DEFAULT 0,
          body BLOB NOT NULL);
        CREATE INDEX resources_by_kind ON resources(kind, deleted, seq);
        CREATE TABLE commands(
          command_id TEXT PRIMARY KEY,
          method TEXT NOT NULL,
          fingerprint BLOB NOT NULL,
          code INTEGER NOT NULL,
          message TEXT NOT NULL,
          response BLOB NOT NULL,
          created_ms INTEGER NOT NULL);
        CREATE INDEX commands_by_time ON commands(created_ms);
      )sql",
      // 2: Workspaces: the namespace identity (one Workspace per namespace) and the
      // Egresses each policy references (DeleteEgress and udp_enabled checks).
      R"sql(
        ALTER TABLE resources ADD COLUMN netns_dev INTEGER;
        ALTER TABLE resources ADD COLUMN netns_ino INTEGER;
        CREATE INDEX resources_by_netns ON resources(netns_dev, netns_ino) WHERE deleted = 0;
        CREATE TABLE egress_refs(
          workspace_id TEXT NOT NULL,
          egress_id TEXT NOT NULL,
          udp INTEGER NOT NULL);
        CREATE INDEX egress_refs_by_egress ON egress_refs(egress_id);
        CREATE INDEX egress_refs_by_workspace ON egress_refs(workspace_id);
      )sql",
      // 3: what a deleted Workspace may have left in its namespace until the agent
      // has removed it (a crash right after the delete committed, a failed removal).
      R"sql(
        CREATE TABLE pending_detaches(
          workspace_id TEXT PRIMARY KEY,
          netns TEXT NOT NULL,
          netns_dev INTEGER NOT NULL,
          netns_ino INTEGER NOT NULL);
      )sql",
  };
  return k;
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

Status apply_step(SqliteDb& db, int version) {
  KIB_TRY(db.exec("BEGIN IMMEDIATE"));
  Status s = db.exec(steps()[static_cast<size_t>(version - 1)]);
  if (s.ok()) {
    auto st = db.prepare("INSERT INTO schema_migrations(version, applied_ms) VALUES(?, ?)");
    s = st.ok() ? st->bind(1, version).bind(2, now_ms()).run() : Status(std::move(st).error());
  }
  if (s.ok()) s = db.exec("COMMIT");
  if (!s.ok()) {
    (void)db.exec("ROLLBACK");
    return Error{Code::internal, "schema migration " + std::to_string(version) + ": " + s.error().message};
  }
  return {};
}

}  // namespace

int latest_schema_version() { return static_cast<int>(steps().size()); }

Result<int> current_schema_version(SqliteDb& db) {
  KIB_TRY(
      db.exec("CREATE TABLE IF NOT EXISTS schema_migrations("
              "version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)"));
  auto v = db.query_int("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  if (!v.ok()) return std::move(v).error();
  return static_cast<int>(*v);
}

Status migrate(SqliteDb& db, int target) {
  if (target < 0 || target > latest_schema_version()) target = latest_schema_version();
  auto current = current_schema_version(db);
  if (!current.ok()) return std::move(current).error();
  if (*current > latest_schema_version())
    return Error{Code::failed_precondition, "the state database has schema version " + std::to_string(*current) +
                                                ", newer than this agent understands (" +
                                                std::to_string(latest_schema_version()) + ")"};
  for (int v = *current + 1; v <= target; ++v) KIB_TRY(apply_step(db, v));
  return {};
}

}  // namespace kib::store
