#include "agent/store/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>

#include "agent/common/errno_error.h"

namespace kib::store {
namespace {

// mkdir -p; only the last component gets 0700 (parents are the system's business).
Status make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string part = path.substr(0, pos);
    mode_t mode = pos == path.size() ? 0700 : 0755;
    if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) return errno_error("create " + part);
  }
  return {};
}

}  // namespace

Result<StateDirLock> StateDirLock::acquire(const std::string& state_dir) {
  if (state_dir.empty()) return Error{Code::invalid_argument, "state_dir is empty"};
  KIB_TRY(make_dirs(state_dir));
  std::string path = state_dir + "/lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return errno_error("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Error{Code::failed_precondition,
                   "another kibotos-agent is running on state dir " + state_dir + " (" + path + " is locked)"};
    return errno_error("lock " + path);
  }
  return StateDirLock(std::move(fd));
}

}  // namespace kib::store
