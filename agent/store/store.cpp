#include "agent/store/store.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>

#include "agent/common/errno_error.h"
#include "agent/common/unique_fd.h"
#include "agent/store/schema_migrations.h"

namespace kib::store {
namespace {

const char* kind_name(Kind k) { return k == Kind::egress ? "egress" : "workspace"; }

// SQLite creates the file with the process umask; create it 0600 first (it also gives
// its -wal and -shm files the database's mode).
Status create_private_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return errno_error("create " + path);
  if (::fchmod(fd.get(), 0600) != 0) return errno_error("chmod " + path);
  return {};
}

Status configure(SqliteDb& db) {
  auto mode = db.prepare("PRAGMA journal_mode=WAL");
  if (!mode.ok()) return std::move(mode).error();
  auto row = mode->step();
  if (!row.ok()) return std::move(row).error();
  if (!*row || mode->column_text(0) != "wal") return Error{Code::internal, "sqlite: cannot enable WAL"};
  // NORMAL: COMMIT does not fsync the WAL; Store::durable does, once for every commit
  // made meanwhile (group_sync.h), before the RPC that made it answers (so it survives
  // kill -9 and power loss). secure_delete: a replaced password does not linger in
  // free pages.
  return db.exec(
      "PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000; PRAGMA foreign_keys=ON;"
      " PRAGMA secure_delete=ON;");
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
    // EINTR: retry. getrandom without GRND_NONBLOCK never fails otherwise once the pool
    // is initialised.
  }
  return out;
}

std::string random_id(std::string_view prefix) {
  static const char* hex = "0123456789abcdef";
  std::string raw = random_bytes(12);
  std::string id(prefix);
  for (unsigned char c : raw) {
    id += hex[c >> 4];
    id += hex[c & 15];
  }
  return id;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& state_dir) {
  auto lock = StateDirLock::acquire(state_dir);
  if (!lock.ok()) return std::move(lock).error();
  std::string path = state_dir + "/state.db";
  KIB_TRY(create_private_file(path));
  auto db = SqliteDb::open(path);
  if (!db.ok()) return std::move(db).error();
  KIB_TRY(configure(*db));
  KIB_TRY(migrate(*db));
  std::unique_ptr<Store> s(new Store(std::move(lock).value(), std::move(db).value(), path));
  KIB_TRY(s->load_secret());
  return s;
}

Status Store::load_secret() {
  return write([&](Transaction&) -> Status {
    auto sel = db_.prepare("SELECT value FROM meta WHERE key = 'page_token_secret'");
    if (!sel.ok()) return std::move(sel).error();
    auto row = sel->step();
    if (!row.ok()) return std::move(row).error();
    if (*row) {
      secret_ = sel->column_blob(0);
      return {};
    }
    secret_ = random_bytes(32);
    auto ins = db_.prepare("INSERT INTO meta(key, value) VALUES('page_token_secret', ?)");
    if (!ins.ok()) return std::move(ins).error();
    return ins->bind_blob(1, secret_).run();
  });
}

Status Store::transact(const char* begin, const std::function<Status(Transaction&)>& fn, uint64_t* commit) {
  std::lock_guard<std::mutex> guard(mu_);
  KIB_TRY(db_.exec(begin));
  Transaction txn(db_);
  Status s = fn(txn);
  if (s.ok()) s = db_.exec("COMMIT");
  if (!s.ok()) (void)db_.exec("ROLLBACK");
  // Numbered under mu_: commit numbers follow the WAL's order.
  if (s.ok() && commit) *commit = sync_.committed();
  return s;
}

Result<uint64_t> Store::write_deferred(const std::function<Status(Transaction&)>& fn) {
  uint64_t commit = 0;
  KIB_TRY(transact("BEGIN IMMEDIATE", fn, &commit));
  return commit;
}

Status Store::write(const std::function<Status(Transaction&)>& fn) {
  auto commit = write_deferred(fn);
  if (!commit.ok()) return std::move(commit).error();
  return durable(*commit);
}
Status Store::read(const std::function<Status(Transaction&)>& fn) { return transact("BEGIN", fn, nullptr); }

Result<std::optional<ResourceRow>> Transaction::get(Kind kind, const std::string& id) {
  auto st = db_.prepare("SELECT seq, id, body FROM resources WHERE kind = ? AND id = ? AND deleted = 0");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, kind_name(kind)).bind(2, id);
  auto row = st->step();
  if (!row.ok()) return std::move(row).error();
  if (!*row) return std::optional<ResourceRow>();
  return std::optional<ResourceRow>(
      ResourceRow{static_cast<uint64_t>(st->column_int(0)), st->column_text(1), st->column_blob(2)});
}

Status Transaction::scan(Kind kind, uint64_t after_seq, const std::function<bool(ResourceRow&&)>& fn) {
  auto st = db_.prepare("SELECT seq, id, body FROM resources WHERE kind = ? AND deleted = 0 AND seq > ? ORDER BY seq");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, kind_name(kind)).bind(2, static_cast<int64_t>(after_seq));
  for (;;) {
    auto row = st->step();
    if (!row.ok()) return std::move(row).error();
    if (!*row) return {};
    if (!fn(ResourceRow{static_cast<uint64_t>(st->column_int(0)), st->column_text(1), st->column_blob(2)})) return {};
  }
}

Result<uint64_t> Transaction::count(Kind kind) {
  auto st = db_.prepare("SELECT COUNT(*) FROM resources WHERE kind = ? AND deleted = 0");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, kind_name(kind));
  auto row = st->step();
  if (!row.ok()) return std::move(row).error();
  return static_cast<uint64_t>(st->column_int(0));
}

Result<uint64_t> Transaction::insert(Kind kind, const std::string& id, std::string_view body,
                                     std::optional<NetnsKey> netns) {
  auto st = db_.prepare("INSERT INTO resources(kind, id, body, netns_dev, netns_ino) VALUES(?, ?, ?, ?, ?)");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, kind_name(kind)).bind(2, id).bind_blob(3, body);
  if (netns) {
    st->bind(4, static_cast<int64_t>(netns->dev)).bind(5, static_cast<int64_t>(netns->ino));
  } else {
    st->bind_null(4).bind_null(5);
  }
  KIB_TRY(st->run());
  return static_cast<uint64_t>(sqlite3_last_insert_rowid(db_.get()));
}

Status Transaction::update(Kind kind, const std::string& id, std::string_view body) {
  auto st = db_.prepare("UPDATE resources SET body = ? WHERE kind = ? AND id = ? AND deleted = 0");
  if (!st.ok()) return std::move(st).error();
  KIB_TRY(st->bind_blob(1, body).bind(2, kind_name(kind)).bind(3, id).run());
  if (sqlite3_changes(db_.get()) != 1) return Error{Code::internal, "store: update of a missing resource " + id};
  return {};
}

Status Transaction::mark_deleted(Kind kind, const std::string& id) {
  auto st = db_.prepare("UPDATE resources SET deleted = 1, body = x'' WHERE kind = ? AND id = ? AND deleted = 0");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, kind_name(kind)).bind(2, id).run();
}

Result<bool> Transaction::netns_attached(const NetnsKey& key) {
  auto st = db_.prepare("SELECT 1 FROM resources WHERE netns_dev = ? AND netns_ino = ? AND deleted = 0 LIMIT 1");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, static_cast<int64_t>(key.dev)).bind(2, static_cast<int64_t>(key.ino));
  return st->step();
}

Result<std::optional<NetnsKey>> Transaction::netns_key(const std::string& workspace_id) {
  auto st = db_.prepare(
      "SELECT netns_dev, netns_ino FROM resources WHERE kind = ? AND id = ? AND deleted = 0 "
      "AND netns_dev IS NOT NULL");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, kind_name(Kind::workspace)).bind(2, workspace_id);
  auto row = st->step();
  if (!row.ok()) return std::move(row).error();
  if (!*row) return std::optional<NetnsKey>();
  return std::optional<NetnsKey>(
      NetnsKey{static_cast<uint64_t>(st->column_int(0)), static_cast<uint64_t>(st->column_int(1))});
}

Status Transaction::set_netns_key(const std::string& workspace_id, const NetnsKey& key) {
  auto st = db_.prepare("UPDATE resources SET netns_dev = ?, netns_ino = ? WHERE kind = ? AND id = ? AND deleted = 0");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, static_cast<int64_t>(key.dev))
      .bind(2, static_cast<int64_t>(key.ino))
      .bind(3, kind_name(Kind::workspace))
      .bind(4, workspace_id)
      .run();
}

Status Transaction::add_pending_detach(const PendingDetach& p) {
  auto st = db_.prepare(
      "INSERT OR REPLACE INTO pending_detaches(workspace_id, netns, netns_dev, netns_ino) VALUES(?, ?, ?, ?)");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, p.workspace_id)
      .bind(2, p.netns)
      .bind(3, static_cast<int64_t>(p.key.dev))
      .bind(4, static_cast<int64_t>(p.key.ino))
      .run();
}

Status Transaction::remove_pending_detach(const std::string& workspace_id) {
  auto st = db_.prepare("DELETE FROM pending_detaches WHERE workspace_id = ?");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, workspace_id).run();
}

Result<std::vector<PendingDetach>> Transaction::pending_detaches() {
  auto st = db_.prepare("SELECT workspace_id, netns, netns_dev, netns_ino FROM pending_detaches ORDER BY rowid");
  if (!st.ok()) return std::move(st).error();
  std::vector<PendingDetach> out;
  for (;;) {
    auto row = st->step();
    if (!row.ok()) return std::move(row).error();
    if (!*row) return out;
    out.push_back(
        PendingDetach{st->column_text(0), st->column_text(1),
                      NetnsKey{static_cast<uint64_t>(st->column_int(2)), static_cast<uint64_t>(st->column_int(3))}});
  }
}

Status Transaction::set_refs(const std::string& workspace_id, const std::vector<EgressRef>& refs) {
  auto del = db_.prepare("DELETE FROM egress_refs WHERE workspace_id = ?");
  if (!del.ok()) return std::move(del).error();
  KIB_TRY(del->bind(1, workspace_id).run());
  for (const auto& r : refs) {
    auto ins = db_.prepare("INSERT INTO egress_refs(workspace_id, egress_id, udp) VALUES(?, ?, ?)");
    if (!ins.ok()) return std::move(ins).error();
    KIB_TRY(ins->bind(1, workspace_id).bind(2, r.egress_id).bind(3, r.udp ? 1 : 0).run());
  }
  return {};
}

Result<bool> Transaction::egress_referenced(const std::string& egress_id, bool udp_only) {
  auto st = db_.prepare(udp_only ? "SELECT 1 FROM egress_refs WHERE egress_id = ? AND udp = 1 LIMIT 1"
                                 : "SELECT 1 FROM egress_refs WHERE egress_id = ? LIMIT 1");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, egress_id);
  return st->step();
}

Result<std::optional<CommandRecord>> Transaction::find_command(const std::string& command_id) {
  auto st =
      db_.prepare("SELECT method, fingerprint, code, message, response, created_ms FROM commands WHERE command_id = ?");
  if (!st.ok()) return std::move(st).error();
  st->bind(1, command_id);
  auto row = st->step();
  if (!row.ok()) return std::move(row).error();
  if (!*row) return std::optional<CommandRecord>();
  CommandRecord r;
  r.command_id = command_id;
  r.method = st->column_text(0);
  r.fingerprint = st->column_blob(1);
  r.code = static_cast<int>(st->column_int(2));
  r.message = st->column_text(3);
  r.response = st->column_blob(4);
  r.created_ms = st->column_int(5);
  return std::optional<CommandRecord>(std::move(r));
}

Status Transaction::record_command(const CommandRecord& r) {
  auto st = db_.prepare(
      "INSERT INTO commands(command_id, method, fingerprint, code, message, response, created_ms)"
      " VALUES(?, ?, ?, ?, ?, ?, ?)");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, r.command_id)
      .bind(2, r.method)
      .bind_blob(3, r.fingerprint)
      .bind(4, r.code)
      .bind(5, r.message)
      .bind_blob(6, r.response)
      .bind(7, r.created_ms)
      .run();
}

Status Transaction::prune_commands(int64_t older_than_ms) {
  auto st = db_.prepare("DELETE FROM commands WHERE created_ms < ?");
  if (!st.ok()) return std::move(st).error();
  return st->bind(1, older_than_ms).run();
}

Status Transaction::savepoint(const std::function<Status()>& fn) {
  KIB_TRY(db_.exec("SAVEPOINT apply"));
  Status s = fn();
  // If even the rollback fails, report that instead: the caller must not commit.
  if (!s.ok()) KIB_TRY(db_.exec("ROLLBACK TO apply"));
  KIB_TRY(db_.exec("RELEASE apply"));
  return s;
}

}  // namespace kib::store
