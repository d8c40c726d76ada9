#pragma once
// The Unix socket listener (default /run/kibotos/ctrl.sock): parent directory created,
// mode and group applied. A stale socket file from a crash is replaced, but a second
// agent on the same socket is refused: it holds "<socket>.lock" (flock) and answers
// on the socket.
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "agent/config/config.h"

namespace kib::api {

class UnixListener {
 public:
  static Result<UnixListener> open(const ApiConfig& api);
  UnixListener(UnixListener&&) = default;
  UnixListener& operator=(UnixListener&&) = default;
  ~UnixListener();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  UnixListener() = default;
  std::string path_;
  UniqueFd lock_;
  UniqueFd fd_;
};

}  // namespace kib::api
