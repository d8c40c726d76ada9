#pragma once
// Move-only owners of sqlite3* and sqlite3_stmt*, and the few typed helpers the
// store needs. Every failure becomes a kib::Error carrying SQLite's own message.
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::store {

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Parameters are numbered from 1, as in SQLite.
  Statement& bind(int i, int64_t v);
  Statement& bind(int i, std::string_view text);
  Statement& bind_blob(int i, std::string_view bytes);
  Statement& bind_null(int i);

  // true: a row is available; false: done. Errors carry SQLite's message.
  Result<bool> step();
  // Steps to completion, for statements that return no rows.
  Status run();

  int64_t column_int(int i) const { return sqlite3_column_int64(stmt_, i); }
  bool column_is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  std::string column_text(int i) const;
  std::string column_blob(int i) const;

 private:
  Status bind_status_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

class SqliteDb {
 public:
  SqliteDb() = default;
  SqliteDb(SqliteDb&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  SqliteDb& operator=(SqliteDb&& o) noexcept;
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;
  ~SqliteDb() { sqlite3_close_v2(db_); }

  // Opens (creating) path read-write, in SQLite's serialized threading mode.
  static Result<SqliteDb> open(const std::string& path);

  Result<Statement> prepare(std::string_view sql);
  // Runs one or more statements that return no rows (schema, pragmas, BEGIN/COMMIT).
  Status exec(const std::string& sql);
  // The single integer a query such as "PRAGMA user_version" returns.
  Result<int64_t> query_int(std::string_view sql);

  sqlite3* get() const { return db_; }

 private:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// An Error with SQLite's current message for db, prefixed by what failed.
Error sqlite_error(sqlite3* db, std::string_view what);

}  // namespace kib::store
