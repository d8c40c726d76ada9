#pragma once
// The agent's nftables helper: a child process that makes every libnftables call.
//
// libnftables (1.0.6) waits for netlink answers with select(): once its socket's
// number reaches FD_SETSIZE (1024) glibc's fortify check aborts the process, and a
// host with ~1,000 relayed connections gets there. When it cannot open that socket
// (EMFILE) it calls exit(). A process with an fd table of its own, a handful of
// fds, meets neither; if it ends anyway, the request fails with an error and the
// next one starts a new helper. The helper is the agent's own binary run again
// (/proc/self/exe: the same version even after an upgrade replaced the file on
// disk), entered from a constructor before main() (nft_helper.cpp), so every
// program linking netns/ can serve as its own helper. It moves into the namespace
// of each request (its fd travels with it) and back to its own afterwards.
//
// Up to kProcesses helpers serve requests at once: writes in different namespaces do
// not wait for one another in the kernel, and a policy update of 2,000 Workspaces is
// mostly such writes. A second helper starts only when a request finds the first busy.
#include <sys/types.h>

#include <array>
#include <mutex>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "netns/nft_wire.h"

namespace kib::netns {

class NftHelper {
 public:
  static constexpr size_t kProcesses = 2;
  // The process-wide helpers (each started at its first call).
  static NftHelper& instance();

  // Sends one request and waits for its reply (at most kReplyTimeout). Errors:
  // resource_exhausted when no helper could be started (out of fds or processes:
  // nothing was written, the caller retries later); unavailable when the helper
  // ended, deadline_exceeded when it stopped answering (either way it is replaced at
  // the next call); otherwise nft's own error.
  Result<NftReply> call(int ns_fd, const NftRequest& req);

  // The first helper's pid, or -1 (tests).
  pid_t pid();

 private:
  // One helper process; it serves one request at a time.
  struct Process {
    ~Process();
    Result<NftReply> call(int ns_fd, const NftRequest& req);  // under mu
    Status start();
    Result<NftReply> exchange(int ns_fd, const NftRequest& req);
    // Kills and reaps the helper; `why` gains its exit status.
    Error stop(Error why);

    std::mutex mu;
    UniqueFd sock;
    pid_t pid = -1;
  };
  NftHelper() = default;

  std::array<Process, kProcesses> processes_;
};

}  // namespace kib::netns
