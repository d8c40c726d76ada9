#pragma once
// Group commit for the store's WAL. SQLite runs with synchronous=NORMAL, so COMMIT
// writes the WAL frames without fsync; a write is acknowledged only once sync() has
// made its commit durable with one fdatasync of the WAL. That fdatasync covers every
// commit made before it started, so writers that commit while one is under way share
// the next one instead of each paying for their own (and the caller may do other
// work, e.g. apply the write to the data plane, between the commit and the sync).
// Survives kill -9 (the frames are in the page cache once COMMIT returns) and power
// loss once sync() returned, like synchronous=FULL.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::store {

class GroupSync {
 public:
  // wal_path: the database's "-wal" file, opened at the first sync (it exists once a
  // transaction ran in WAL mode).
  explicit GroupSync(std::string wal_path) : wal_path_(std::move(wal_path)) {}

  // Called right after each COMMIT: the commit's number, for sync().
  uint64_t committed();
  // Returns once commit `n` is on disk, or with the error of the fdatasync that
  // should have put it there (the commit is then visible but may not survive a power
  // loss; a later sync that succeeds covers it again).
  Status sync(uint64_t n);
  // fdatasync calls made so far (tests: concurrent writers share them).
  uint64_t syncs() const;

 private:
  Status sync_file();  // the leader's fdatasync, without mu_

  const std::string wal_path_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  UniqueFd wal_;
  uint64_t committed_ = 0;
  uint64_t synced_ = 0;  // every commit up to this number is on disk
  bool syncing_ = false;
  uint64_t syncs_ = 0;
};

}  // namespace kib::store
