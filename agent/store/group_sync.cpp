#include "agent/store/group_sync.h"

#include <fcntl.h>
#include <unistd.h>

#include "agent/common/errno_error.h"

namespace kib::store {
namespace {

// The directory entry of a file just created, durable too (once per WAL file).
Status sync_parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error("open " + dir);
  if (::fsync(fd.get()) != 0) return errno_error("fsync " + dir);
  return {};
}

}  // namespace

uint64_t GroupSync::committed() {
  std::lock_guard lk(mu_);
  return ++committed_;
}

uint64_t GroupSync::syncs() const {
  std::lock_guard lk(mu_);
  return syncs_;
}

Status GroupSync::sync_file() {
  if (!wal_) {
    UniqueFd fd(::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return errno_error("open " + wal_path_);
    KIB_TRY(sync_parent_dir(wal_path_));
    wal_ = std::move(fd);
  }
  if (::fdatasync(wal_.get()) != 0) return errno_error("fdatasync " + wal_path_);
  return {};
}

Status GroupSync::sync(uint64_t n) {
  std::unique_lock lk(mu_);
  while (synced_ < n) {
    if (syncing_) {
      done_.wait(lk);
      continue;
    }
    // The leader: one fdatasync for every commit made so far, its own included.
    syncing_ = true;
    const uint64_t target = committed_;
    lk.unlock();
    Status st = sync_file();
    lk.lock();
    syncing_ = false;
    ++syncs_;
    if (st.ok() && target > synced_) synced_ = target;
    done_.notify_all();
    if (!st.ok()) return st;  // the others try again themselves
  }
  return {};
}

}  // namespace kib::store
