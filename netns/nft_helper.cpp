#include "netns/nft_helper.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "agent/common/errno_error.h"
#include "netns/nft_local.h"

extern char** environ;

namespace kib::netns {
namespace {

constexpr const char* kHelperArg = "--kibotos-nft-helper";
constexpr int kHelperSock = 3;  // the helper's end of the socket pair
// nft writes take milliseconds; a helper silent this long is stuck and replaced.
constexpr std::chrono::seconds kReplyTimeout{30};

NftReply handle(int ns_fd, const NftRequest& req) {
  if (::setns(ns_fd, CLONE_NEWNET) != 0) return {errno_error("setns into the namespace"), std::nullopt, std::nullopt};
  if (req.op == NftOp::run) {
    auto out = nft_run_here(req.text);
    if (!out.ok()) return {std::move(out).error(), std::nullopt, std::nullopt};
    return {{}, std::move(*out), std::nullopt};
  }
  if (req.op != NftOp::write)
    return {make_error(Code::internal, "nft helper: unknown request"), std::nullopt, std::nullopt};
  auto written = nft_write_here(req.text, req.list);
  if (!written.ok()) return {std::move(written).error(), std::nullopt, std::nullopt};
  if (!*written) return {{}, std::nullopt, std::nullopt};
  return {{}, std::move((*written)->listing), (*written)->generation};
}

// The helper process: serves requests until the agent closes its end (it ended or
// replaces this helper). It returns to its own namespace after each request so that
// it never keeps a guest's namespace alive.
[[noreturn]] void serve() {
  ::prctl(PR_SET_NAME, "kibotos-nft");  // not "exe" (it was started as /proc/self/exe) in ps and top
  UniqueFd home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home) _exit(1);
  for (;;) {
    auto req = recv_nft_request(kHelperSock);
    if (!req.ok()) _exit(0);
    NftReply reply = handle(req->first.get(), req->second);
    req->first.reset();
    if (::setns(home.get(), CLONE_NEWNET) != 0) _exit(1);
    if (!send_nft_reply(kHelperSock, reply).ok()) _exit(0);
  }
}

// glibc passes main's arguments to constructors: a program started as the helper
// never reaches its own main().
__attribute__((constructor)) void nft_helper_entry(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], kHelperArg) == 0) serve();
}

void set_timeouts(int fd) {
  timeval tv{static_cast<time_t>(kReplyTimeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::string exit_words(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

NftHelper& NftHelper::instance() {
  static NftHelper helper;
  return helper;
}

NftHelper::Process::~Process() {
  if (pid > 0) {
    sock.reset();  // the helper ends at EOF
    ::waitpid(pid, nullptr, 0);
  }
}

pid_t NftHelper::pid() {
  std::lock_guard lk(processes_[0].mu);
  return processes_[0].pid;
}

Status NftHelper::Process::start() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return errno_error("start the nftables helper: socketpair", errno, Code::resource_exhausted);
  UniqueFd ours(sv[0]), theirs(sv[1]);
  if (theirs.get() == kHelperSock) {
    // dup2 onto itself would keep CLOEXEC: move it out of the way first.
    UniqueFd moved(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, kHelperSock + 1));
    if (!moved) return errno_error("start the nftables helper: dup", errno, Code::resource_exhausted);
    theirs = std::move(moved);
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), kHelperSock);
  // Whatever the agent holds without CLOEXEC stays out of the helper's fd table.
  posix_spawn_file_actions_addclosefrom_np(&fa, kHelperSock + 1);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);  // the agent blocks SIGTERM for its signalfd
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  char arg0[] = "kibotos-nft-helper";
  char arg1[sizeof "--kibotos-nft-helper"];
  std::memcpy(arg1, kHelperArg, sizeof arg1);
  char* argv[] = {arg0, arg1, nullptr};
  pid_t child = -1;
  int err = ::posix_spawn(&child, "/proc/self/exe", &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return errno_error("start the nftables helper", err, Code::resource_exhausted);
  set_timeouts(ours.get());
  sock = std::move(ours);
  pid = child;
  return {};
}

Error NftHelper::Process::stop(Error why) {
  sock.reset();
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid) why.message += " (nftables helper ended: " + exit_words(status) + ")";
  }
  pid = -1;
  return why;
}

Result<NftReply> NftHelper::Process::exchange(int ns_fd, const NftRequest& req) {
  if (Status st = send_nft_request(sock.get(), ns_fd, req); !st.ok()) return stop(std::move(st).error());
  auto reply = recv_nft_reply(sock.get());
  if (!reply.ok()) return stop(std::move(reply).error());
  return reply;
}

Result<NftReply> NftHelper::Process::call(int ns_fd, const NftRequest& req) {
  // A helper that ended since the last call (or died on this request) is replaced
  // once: nft applies a buffer as one transaction, so sending it again is safe.
  for (int attempt = 0;; ++attempt) {
    const bool fresh = !sock;
    if (fresh) KIB_TRY(start());
    auto reply = exchange(ns_fd, req);
    if (reply.ok() || fresh || attempt > 0) return reply;
  }
}

Result<NftReply> NftHelper::call(int ns_fd, const NftRequest& req) {
  // The first idle helper, in order: the later ones start only under concurrency.
  for (auto& p : processes_) {
    std::unique_lock lk(p.mu, std::try_to_lock);
    if (lk.owns_lock()) return p.call(ns_fd, req);
  }
  auto& p = processes_[0];
  std::lock_guard lk(p.mu);
  return p.call(ns_fd, req);
}

}  // namespace kib::netns
