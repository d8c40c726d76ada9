#include "agent/ctl/input_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "agent/common/unique_fd.h"

namespace kib::ctl {

Result<std::string> read_input(const std::string& path) {
  UniqueFd owned;
  int fd = STDIN_FILENO;
  if (path != "-") {
    owned = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned) return Error{Code::invalid_argument, "cannot read " + path + ": " + std::strerror(errno)};
    fd = owned.get();
  }
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{Code::invalid_argument, "cannot read " + path + ": " + std::strerror(errno)};
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxInputBytes) return Error{Code::invalid_argument, path + ": larger than 1 MiB"};
  }
  return out;
}

}  // namespace kib::ctl
