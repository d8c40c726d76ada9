#include "agent/api/services/netns_identity.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>

#include "agent/api/conventions/quoted.h"
#include "agent/common/errno_error.h"
#include "agent/common/unique_fd.h"

namespace kib::api {

Result<store::NetnsKey> network_namespace_identity(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return Error{Code::failed_precondition, "netns " + quoted(path) + " " + why};
  };
  if (path.empty() || path[0] != '/' || path.size() > 4096) return fail("must be an absolute path");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  // The agent's own shortage, not the request's: unavailable is not remembered under
  // the command ID, so the same call retried later goes through.
  if (!fd && out_of_resources(errno))
    return Error{Code::unavailable,
                 "netns " + quoted(path) +
                     " cannot be opened now (the agent is short of fds or memory): " + std::strerror(errno)};
  if (!fd) return fail(errno == ENOENT ? "does not exist" : std::string("cannot be opened: ") + std::strerror(errno));
  struct statfs fs {};
  if (::fstatfs(fd.get(), &fs) != 0 || fs.f_type != static_cast<decltype(fs.f_type)>(NSFS_MAGIC))
    return fail("is not a namespace");
  int type = ::ioctl(fd.get(), NS_GET_NSTYPE);
  if (type != CLONE_NEWNET) return fail("is not a network namespace");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(std::string("cannot be examined: ") + std::strerror(errno));
  return store::NetnsKey{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace kib::api
