#include "netns/namespace_handle.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <system_error>
#include <thread>

#include "agent/common/errno_error.h"

namespace kib::netns {

Result<NamespaceHandle> NamespaceHandle::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    int err = errno;
    const Code code = err == ENOENT           ? Code::failed_precondition
                      : out_of_resources(err) ? Code::resource_exhausted
                                              : Code::invalid_argument;
    return errno_error("open namespace " + path, err, code);
  }
  int type = ::ioctl(fd.get(), NS_GET_NSTYPE);
  if (type < 0) return errno_error(path + " is not a namespace", errno, Code::invalid_argument);
  if (type != CLONE_NEWNET) return make_error(Code::invalid_argument, path + " is not a network namespace");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("fstat " + path);
  return NamespaceHandle(std::move(fd), path, st.st_dev, st.st_ino);
}

bool NamespaceHandle::alive() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;
  return st.st_dev == dev_ && st.st_ino == ino_;
}

Result<uint64_t> netns_cookie(int fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (::getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) return errno_error("SO_NETNS_COOKIE");
  return cookie;
}

Status run_in_netns_void(int ns_fd, const std::function<Status()>& fn) {
  Status out;
  // A fresh thread: setns() changes only this thread, which exits right after, so no
  // thread of the agent is ever left in a guest namespace.
  try {
    std::thread worker([&] {
      if (::setns(ns_fd, CLONE_NEWNET) != 0) {
        out = errno_error("setns");
        return;
      }
      out = fn();
    });
    worker.join();
  } catch (const std::system_error& e) {
    return make_error(Code::resource_exhausted, std::string("start namespace thread: ") + e.what());
  }
  return out;
}

}  // namespace kib::netns
