#pragma once
// SIGTERM, SIGINT and SIGHUP delivered through a signalfd to the main thread. Block
// them (block_daemon_signals) before any thread starts so no other thread takes them.
#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::daemon {

enum class DaemonSignal { stop, reload };

// Blocks SIGTERM/SIGINT/SIGHUP in the calling thread (inherited by threads it
// starts) and ignores SIGPIPE (a client that closes early is not a crash).
void block_daemon_signals();

class SignalWaiter {
 public:
  static Result<SignalWaiter> open();
  // Blocks until the next signal.
  DaemonSignal wait();

 private:
  explicit SignalWaiter(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace kib::daemon
