#pragma once
// The exclusive lock on "<state_dir>/lock" that keeps a second agent off the same
// state directory. The kernel drops it when the holder dies, even by SIGKILL.
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::store {

class StateDirLock {
 public:
  // Creates state_dir (mode 0700) if missing, then takes the lock without waiting:
  // failed_precondition naming the directory when another process holds it.
  static Result<StateDirLock> acquire(const std::string& state_dir);

 private:
  explicit StateDirLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace kib::store
