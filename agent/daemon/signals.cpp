#include "agent/daemon/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>
#include <csignal>

#include "agent/common/errno_error.h"

namespace kib::daemon {
namespace {

sigset_t daemon_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

void block_daemon_signals() {
  sigset_t set = daemon_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

Result<SignalWaiter> SignalWaiter::open() {
  sigset_t set = daemon_signals();
  UniqueFd fd(::signalfd(-1, &set, SFD_CLOEXEC));
  if (!fd) return errno_error("signalfd");
  return SignalWaiter(std::move(fd));
}

DaemonSignal SignalWaiter::wait() {
  for (;;) {
    signalfd_siginfo info{};
    ssize_t n = ::read(fd_.get(), &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGHUP) return DaemonSignal::reload;
      if (info.ssi_signo == SIGUSR2) return DaemonSignal::upgrade;
      return DaemonSignal::stop;
    }
    if (n < 0 && errno == EINTR) continue;
    return DaemonSignal::stop;  // the fd broke: stopping is the safe answer
  }
}

}  // namespace kib::daemon
