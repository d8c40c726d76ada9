#pragma once
// An open network namespace (by path, e.g. /run/netns/NAME) and a way to run code
// inside it without moving the calling thread.
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::netns {

class NamespaceHandle {
 public:
  // invalid_argument when the path is not a network namespace, failed_precondition
  // when it does not exist, resource_exhausted when the agent is out of fds.
  static Result<NamespaceHandle> open(const std::string& path);

  NamespaceHandle(NamespaceHandle&&) = default;
  NamespaceHandle& operator=(NamespaceHandle&&) = default;
  NamespaceHandle(const NamespaceHandle&) = delete;  // one owner; shared_fd() to share the fd
  NamespaceHandle& operator=(const NamespaceHandle&) = delete;

  int fd() const { return fd_ ? fd_->get() : -1; }  // -1 once moved from
  // The fd itself, for a holder that may outlive this handle (the DNS service opens
  // reply sockets in the namespace): one fd per namespace, however many hold it.
  std::shared_ptr<const UniqueFd> shared_fd() const { return fd_; }
  const std::string& path() const { return path_; }
  dev_t dev() const { return dev_; }
  ino_t ino() const { return ino_; }
  // True while the path still names the namespace we hold (`ip netns del` unmounts
  // it; our fd keeps the namespace itself alive, but nobody else can reach it).
  bool alive() const;

 private:
  NamespaceHandle(UniqueFd fd, std::string path, dev_t dev, ino_t ino)
      : fd_(std::make_shared<const UniqueFd>(std::move(fd))), path_(std::move(path)), dev_(dev), ino_(ino) {}
  std::shared_ptr<const UniqueFd> fd_;  // null once moved from
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// The cookie of the network namespace socket `fd` lives in (SO_NETNS_COOKIE): unique
// among all namespaces since boot, never reused as inode numbers are.
Result<uint64_t> netns_cookie(int fd);

// Runs fn on a short-lived thread that has setns()'d into the namespace `ns_fd`; the
// calling thread never changes namespace. Sockets fn creates stay in that namespace.
Status run_in_netns_void(int ns_fd, const std::function<Status()>& fn);

// Typed form: returns fn's Result<T>.
template <typename T>
Result<T> run_in_netns(int ns_fd, const std::function<Result<T>()>& fn) {
  std::optional<Result<T>> out;
  Status st = run_in_netns_void(ns_fd, [&]() -> Status {
    out.emplace(fn());
    return {};
  });
  if (!st.ok()) return std::move(st).error();
  return std::move(*out);
}

}  // namespace kib::netns
