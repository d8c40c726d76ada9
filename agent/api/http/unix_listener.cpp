#include "agent/api/http/unix_listener.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "agent/common/errno_error.h"
#include "agent/common/unix_address.h"

namespace kib::api {
namespace {

Status make_parent_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Error{Code::internal, "cannot create the directory of " + path + ": " + ec.message()};
  return {};
}

Result<UniqueFd> take_lock(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return errno_error("cannot open " + lock_path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Error{Code::failed_precondition,
                   "another kibotos-agent is already serving " + socket_path + " (it holds " + lock_path + ")"};
    return errno_error("cannot lock " + lock_path);
  }
  return fd;
}

// An existing socket file is stale unless something answers on it.
Status remove_stale_socket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return Error{Code::failed_precondition, path + " exists and is not a socket"};
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
    return Error{Code::failed_precondition, "another process is already serving " + path};
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error("cannot remove stale socket " + path);
  return {};
}

}  // namespace

Result<gid_t> lookup_socket_group(const std::string& name) {
  std::vector<char> buf(16384);
  group grp{};
  group* found = nullptr;
  int rc = ::getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr)
    return Error{Code::invalid_argument, "api.unix_socket_group: no group named " + name};
  return found->gr_gid;
}

Result<UnixListener> UnixListener::open(const ApiConfig& api) {
  UnixListener l;
  l.path_ = api.unix_socket;
  KIB_TRY_ASSIGN(auto addr, unix_address(l.path_));
  KIB_TRY(make_parent_dir(l.path_));
  KIB_TRY_ASSIGN(auto lock, take_lock(l.path_));
  l.lock_ = std::move(lock);
  KIB_TRY(remove_stale_socket(l.path_, addr));

  l.fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!l.fd_) return errno_error("socket(AF_UNIX)");
  if (::bind(l.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return errno_error("cannot bind " + l.path_);
  if (::chmod(l.path_.c_str(), api.unix_socket_mode) != 0) return errno_error("cannot chmod " + l.path_);
  if (!api.unix_socket_group.empty()) {
    KIB_TRY_ASSIGN(auto gid, lookup_socket_group(api.unix_socket_group));
    if (::chown(l.path_.c_str(), static_cast<uid_t>(-1), gid) != 0) return errno_error("cannot chown " + l.path_);
  }
  if (::listen(l.fd_.get(), 128) != 0) return errno_error("cannot listen on " + l.path_);
  return l;
}

UnixListener UnixListener::adopt(const ApiConfig& api, UniqueFd fd, UniqueFd lock) {
  UnixListener l;
  l.path_ = api.unix_socket;
  l.fd_ = std::move(fd);
  l.lock_ = std::move(lock);
  return l;
}

UnixListener::~UnixListener() {
  // Only the owner of the lock removes the socket file (a refused second agent has
  // neither and must not touch the first one's socket).
  if (fd_ && lock_ && !keep_file_) ::unlink(path_.c_str());
}

}  // namespace kib::api
