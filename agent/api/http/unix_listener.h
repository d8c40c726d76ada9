#pragma once
// The Unix socket listener (default /run/kibotos/ctrl.sock): parent directory created,
// mode and group applied. A stale socket file from a crash is replaced, but a second
// agent on the same socket is refused: it holds "<socket>.lock" (flock) and answers
// on the socket.
#include <sys/types.h>

#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/config/config.h"

namespace kib::api {

// api.unix_socket_group's gid; the error names the key.
Result<gid_t> lookup_socket_group(const std::string& name);

class UnixListener {
 public:
  static Result<UnixListener> open(const ApiConfig& api);
  // The listener and lock another agent handed over (take-over): already bound,
  // listening and locked.
  static UnixListener adopt(const ApiConfig& api, UniqueFd fd, UniqueFd lock);
  UnixListener(UnixListener&&) = default;
  UnixListener& operator=(UnixListener&&) = default;
  ~UnixListener();

  int fd() const { return fd_.get(); }
  int lock_fd() const { return lock_.get(); }
  // Handed over to the next agent: the socket file is its now, not removed at exit.
  void keep_socket_file() { keep_file_ = true; }
  const std::string& path() const { return path_; }

 private:
  UnixListener() = default;
  std::string path_;
  UniqueFd lock_;
  UniqueFd fd_;
  bool keep_file_ = false;
};

}  // namespace kib::api
