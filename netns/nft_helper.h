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
#include <sys/types.h>

#include <mutex>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "netns/nft_wire.h"

namespace kib::netns {

class NftHelper {
 public:
  // The process-wide helper (started at the first call).
  static NftHelper& instance();
  ~NftHelper();

  // Sends one request and waits for its reply (at most kReplyTimeout). Errors:
  // resource_exhausted when no helper could be started (out of fds or processes:
  // nothing was written, the caller retries later); unavailable when the helper
  // ended, deadline_exceeded when it stopped answering (either way it is replaced at
  // the next call); otherwise nft's own error.
  Result<NftReply> call(int ns_fd, const NftRequest& req);

  // The running helper's pid, or -1 (tests).
  pid_t pid();

 private:
  NftHelper() = default;
  Status start();
  Result<NftReply> exchange(int ns_fd, const NftRequest& req);
  // Kills and reaps the helper; `why` gains its exit status.
  Error stop(Error why);

  std::mutex mu_;  // one request at a time: the helper serves them in turn
  UniqueFd sock_;
  pid_t pid_ = -1;
};

}  // namespace kib::netns
