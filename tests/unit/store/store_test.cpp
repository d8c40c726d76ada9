// The durable store: files, lock, migrations, transactions, command log rows.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "agent/store/schema_migrations.h"
#include "agent/store/store.h"

using namespace kib;
using namespace kib::store;

namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kibotos-store-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_; }

 private:
  std::string path_;
};

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

std::unique_ptr<Store> must_open(const std::string& dir) {
  auto s = Store::open(dir);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

}  // namespace

TEST_CASE("Store: creates the state dir 0700 and the database 0600, WAL mode") {
  TempDir t;
  std::string dir = t.path() + "/a/b/state";
  auto s = must_open(dir);
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir + "/state.db") == 0600);
  REQUIRE(s->write([](Transaction& txn) -> Status {
             return txn.insert(Kind::egress, "eg-1", "x").ok() ? Status() : Status(Error{});
           }).ok());
  CHECK(mode_of(dir + "/state.db-wal") == 0600);
  auto db = SqliteDb::open(dir + "/state.db");
  REQUIRE(db.ok());
  auto st = db->prepare("PRAGMA journal_mode");
  REQUIRE(st.ok());
  REQUIRE(*st->step());
  CHECK(st->column_text(0) == "wal");
}

TEST_CASE("Store: a second agent on the same state dir refuses with a clear message") {
  TempDir t;
  auto first = must_open(t.path());
  auto second = Store::open(t.path());
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code == Code::failed_precondition);
  CHECK(second.error().message.find("another kibotos-agent") != std::string::npos);
  first.reset();
  CHECK(Store::open(t.path()).ok());  // the lock goes with its holder
}

TEST_CASE("Store: migrates a version-1 file forward, keeping its data") {
  TempDir t;
  {
    auto db = SqliteDb::open(t.path() + "/state.db");
    REQUIRE(db.ok());
    REQUIRE(migrate(*db, 1).ok());
    CHECK(*current_schema_version(*db) == 1);
    REQUIRE(db->exec("INSERT INTO resources(kind, id, body) VALUES('egress', 'eg-old', x'0102')").ok());
  }
  auto s = must_open(t.path());
  REQUIRE(s->read([](Transaction& txn) -> Status {
             auto row = txn.get(Kind::egress, "eg-old");
             REQUIRE(row.ok());
             REQUIRE(row->has_value());
             CHECK((*row)->body == std::string("\x01\x02", 2));
             // Version 2's columns and tables are there.
             CHECK(txn.set_refs("ws-1", {{"eg-old", true}}).ok());
             CHECK(*txn.egress_referenced("eg-old", true));
             return {};
           }).ok());
  s.reset();
  auto db = SqliteDb::open(t.path() + "/state.db");
  CHECK(*current_schema_version(*db) == latest_schema_version());
  CHECK(*db->query_int("SELECT COUNT(*) FROM schema_migrations") == latest_schema_version());
}

TEST_CASE("Store: a database written by a newer agent is refused, not downgraded") {
  TempDir t;
  {
    auto db = SqliteDb::open(t.path() + "/state.db");
    REQUIRE(migrate(*db).ok());
    REQUIRE(db->exec("INSERT INTO schema_migrations(version, applied_ms) VALUES(999, 0)").ok());
  }
  auto s = Store::open(t.path());
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == Code::failed_precondition);
}

TEST_CASE("Store: a failed write transaction leaves nothing behind") {
  TempDir t;
  auto s = must_open(t.path());
  Status st = s->write([](Transaction& txn) -> Status {
    REQUIRE(txn.insert(Kind::egress, "eg-1", "x").ok());
    return Error{Code::aborted, "no"};
  });
  CHECK(st.error().code == Code::aborted);
  REQUIRE(s->read([](Transaction& txn) -> Status {
             CHECK_FALSE(txn.get(Kind::egress, "eg-1")->has_value());
             return {};
           }).ok());
}

TEST_CASE("Store: a write is on disk when it returns; commits made before one sync share it") {
  TempDir t;
  auto s = must_open(t.path());
  auto insert = [](const std::string& id) {
    return [id](Transaction& txn) -> Status {
      return txn.insert(Kind::egress, id, "x").ok() ? Status() : Status(Error{});
    };
  };
  const uint64_t before = s->syncs();
  REQUIRE(s->write(insert("eg-1")).ok());
  CHECK(s->syncs() == before + 1);  // write() waits for its own fdatasync
  // Two commits, then their syncs: the later commit's sync covers the earlier one.
  auto first = s->write_deferred(insert("eg-2"));
  auto second = s->write_deferred(insert("eg-3"));
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(*second > *first);
  REQUIRE(s->durable(*second).ok());
  REQUIRE(s->durable(*first).ok());
  CHECK(s->syncs() == before + 2);
  // A failed transaction commits nothing and gets no number.
  auto failed = s->write_deferred([](Transaction&) -> Status { return Error{Code::aborted, "no"}; });
  CHECK(failed.error().code == Code::aborted);
  s.reset();
  auto again = must_open(t.path());
  REQUIRE(again
              ->read([](Transaction& txn) -> Status {
                for (const char* id : {"eg-1", "eg-2", "eg-3"}) CHECK(txn.get(Kind::egress, id)->has_value());
                return {};
              })
              .ok());
}

TEST_CASE("Store: a savepoint undoes only what its function wrote") {
  TempDir t;
  auto s = must_open(t.path());
  REQUIRE(s->write([](Transaction& txn) -> Status {
             REQUIRE(txn.insert(Kind::egress, "eg-kept", "x").ok());
             Status inner = txn.savepoint([&]() -> Status {
               REQUIRE(txn.insert(Kind::egress, "eg-undone", "y").ok());
               return Error{Code::not_found, "x"};
             });
             CHECK(inner.error().code == Code::not_found);
             return {};
           }).ok());
  REQUIRE(s->read([](Transaction& txn) -> Status {
             CHECK(txn.get(Kind::egress, "eg-kept")->has_value());
             CHECK_FALSE(txn.get(Kind::egress, "eg-undone")->has_value());
             return {};
           }).ok());
}

TEST_CASE("Store: resources are listed in creation order, deleted ones are gone to every read") {
  TempDir t;
  auto s = must_open(t.path());
  REQUIRE(s->write([](Transaction& txn) -> Status {
             for (const char* id : {"eg-c", "eg-a", "eg-b"}) REQUIRE(txn.insert(Kind::egress, id, id).ok());
             REQUIRE(txn.insert(Kind::workspace, "ws-1", "w", NetnsKey{1, 2}).ok());
             return txn.mark_deleted(Kind::egress, "eg-a");
           }).ok());
  REQUIRE(s->read([](Transaction& txn) -> Status {
             std::vector<std::string> ids;
             REQUIRE(txn.scan(
                            Kind::egress, 0,
                            [&](ResourceRow&& r) {
      ids.push_back(r.id);
      return true;
                            })
                         .ok());
             CHECK(ids == std::vector<std::string>{"eg-c", "eg-b"});
             CHECK_FALSE(txn.get(Kind::egress, "eg-a")->has_value());
             CHECK(*txn.count(Kind::egress) == 2);
             CHECK(*txn.netns_attached(NetnsKey{1, 2}));
             CHECK_FALSE(*txn.netns_attached(NetnsKey{1, 3}));
             return {};
           }).ok());
}

TEST_CASE("Store: the page-token secret is generated once and kept across restarts") {
  TempDir t;
  std::string secret;
  {
    auto s = must_open(t.path());
    secret = s->page_token_secret();
    CHECK(secret.size() == 32);
  }
  auto s = must_open(t.path());
  CHECK(s->page_token_secret() == secret);
}

TEST_CASE("Store: command records survive a reopen and are pruned by age") {
  TempDir t;
  {
    auto s = must_open(t.path());
    REQUIRE(s->write([](Transaction& txn) -> Status {
               CommandRecord r{"c-old", "M", std::string(32, 'f'), 0, "", "resp", 1000};
               KIB_TRY(txn.record_command(r));
               r.command_id = "c-new";
               r.created_ms = 5000;
               r.code = 10;
               r.message = "aborted";
               return txn.record_command(r);
             }).ok());
  }
  auto s = must_open(t.path());
  REQUIRE(s->write([](Transaction& txn) -> Status {
             auto old = txn.find_command("c-old");
             REQUIRE(old->has_value());
             CHECK((*old)->response == "resp");
             KIB_TRY(txn.prune_commands(2000));
             CHECK_FALSE(txn.find_command("c-old")->has_value());
             auto kept = txn.find_command("c-new");
             REQUIRE(kept->has_value());
             CHECK((*kept)->code == 10);
             CHECK((*kept)->message == "aborted");
             return {};
           }).ok());
}

TEST_CASE("Store: random IDs are opaque, prefixed, and distinct") {
  std::string a = random_id("eg-"), b = random_id("eg-");
  CHECK(a.size() == 27);
  CHECK(a.rfind("eg-", 0) == 0);
  CHECK(a != b);
}
