#include "agent/store/sqlite_db.h"

#include <cstring>
#include <utility>

namespace kib::store {
namespace {

// What a client can do about it: a full state dir is resource_exhausted, a disk that
// fails or turned read-only is unavailable (retry once it is repaired: a failed write
// leaves nothing behind, its command ID included); anything else is our bug.
Code code_of(sqlite3* db) {
  if (db == nullptr) return Code::resource_exhausted;  // sqlite could not allocate
  switch (sqlite3_extended_errcode(db) & 0xff) {
    case SQLITE_FULL:
    case SQLITE_NOMEM: return Code::resource_exhausted;
    case SQLITE_READONLY:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Code::unavailable;
    default: return Code::internal;
  }
}

// sqlite's message, and the operating system's reason when there is one (EROFS
// says more than "disk I/O error").
Error error_of(sqlite3* db, std::string msg) {
  if (db != nullptr) {
    if (const int os = sqlite3_system_errno(db); os != 0) {
      msg += " (";
      msg += std::strerror(os);
      msg += ")";
    }
  }
  return Error{code_of(db), std::move(msg)};
}

}  // namespace

Error sqlite_error(sqlite3* db, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : "out of memory";
  return error_of(db, std::move(msg));
}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
    bind_status_ = std::move(o.bind_status_);
  }
  return *this;
}

// Bind failures are kept and reported by the next step(), so call sites stay a chain.
Statement& Statement::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK && bind_status_.ok()) bind_status_ = sqlite_error(db_, "bind");
  return *this;
}

Statement& Statement::bind(int i, std::string_view text) {
  if (sqlite3_bind_text64(stmt_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8) != SQLITE_OK &&
      bind_status_.ok())
    bind_status_ = sqlite_error(db_, "bind");
  return *this;
}

Statement& Statement::bind_blob(int i, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
  static const char empty = 0;
  const void* p = bytes.empty() ? &empty : bytes.data();
  if (sqlite3_bind_blob64(stmt_, i, p, bytes.size(), SQLITE_TRANSIENT) != SQLITE_OK && bind_status_.ok())
    bind_status_ = sqlite_error(db_, "bind");
  return *this;
}

Statement& Statement::bind_null(int i) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK && bind_status_.ok()) bind_status_ = sqlite_error(db_, "bind");
  return *this;
}

Result<bool> Statement::step() {
  if (!bind_status_.ok()) return bind_status_.error();
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_error(db_, "step");
}

Status Statement::run() {
  for (;;) {
    auto r = step();
    if (!r.ok()) return std::move(r).error();
    if (!*r) return {};
  }
}

std::string Statement::column_text(int i) const {
  const unsigned char* p = sqlite3_column_text(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

std::string Statement::column_blob(int i) const {
  const void* p = sqlite3_column_blob(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

SqliteDb& SqliteDb::operator=(SqliteDb&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Result<SqliteDb> SqliteDb::open(const std::string& path) {
  sqlite3* raw = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_EXRESCODE;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  SqliteDb db(raw);  // owns raw even on failure
  if (rc != SQLITE_OK) return sqlite_error(raw, "open " + path);
  return db;
}

Result<Statement> SqliteDb::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK)
    return sqlite_error(db_, "prepare");
  return Statement(db_, stmt);
}

Status SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Error e = error_of(db_, std::string("sqlite: ") + (err ? err : sqlite3_errmsg(db_)));
    sqlite3_free(err);
    return e;
  }
  return {};
}

Result<int64_t> SqliteDb::query_int(std::string_view sql) {
  auto st = prepare(sql);
  if (!st.ok()) return std::move(st).error();
  auto row = st->step();
  if (!row.ok()) return std::move(row).error();
  if (!*row) return Error{Code::internal, "sqlite: query returned no row"};
  return st->column_int(0);
}

}  // namespace kib::store
