#pragma once
// SIGTERM, SIGINT, SIGHUP and SIGUSR2 delivered through a signalfd to the main thread. Block
// them (block_daemon_signals) before any thread starts so no other thread takes them.
#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::daemon {

// SIGTERM/SIGINT: stop. SIGHUP: reload the TLS files. SIGUSR2: start a new agent
// that takes over from this one (systemctl reload, package upgrades).
enum class DaemonSignal { stop, reload, upgrade };

// Blocks SIGTERM/SIGINT/SIGHUP/SIGUSR2 in the calling thread (inherited by threads it
// starts) and ignores SIGPIPE (a client that closes early is not a crash).
void block_daemon_signals();

class SignalWaiter {
 public:
  static Result<SignalWaiter> open();
  // Blocks until the next signal.
  DaemonSignal wait();
  // Readable when a signal is pending (for poll(2) beside other fds).
  int fd() const { return fd_.get(); }

 private:
  explicit SignalWaiter(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace kib::daemon
