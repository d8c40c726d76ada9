#include "agent/daemon/fd_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/common/errno_error.h"
#include "agent/daemon/handover.h"
#include "agent/daemon/relay_handover.h"

namespace kib::daemon {
namespace {

// Nobody reads the stored socket until the next agent starts, so every message must
// fit its send buffer at once (SO_SNDBUFFORCE: CAP_NET_ADMIN). Memory is used only
// for what is queued: a relay's unsent bytes at most.
constexpr int kStoreBufferBytes = 512 * 1024 * 1024;

void free_names(char** names) {
  if (names == nullptr) return;
  for (char** n = names; *n != nullptr; ++n) std::free(*n);
  std::free(names);
}

}  // namespace

bool fd_store_available() {
  const char* notify = std::getenv("NOTIFY_SOCKET");
  const char* store = std::getenv("FDSTORE");
  return notify != nullptr && *notify != '\0' && store != nullptr && std::atoi(store) > 0;
}

Status store_for_restart(Runtime& runtime, std::chrono::milliseconds timeout) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return errno_error("socketpair");
  UniqueFd writer(sv[0]), stored(sv[1]);
  const int room = kStoreBufferBytes;
  if (::setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) != 0)
    spdlog::warn("restart: SO_SNDBUFFORCE: {}; relays past the default buffer are reset", std::strerror(errno));
  // A full buffer fails the send (that relay and the rest are reset) instead of
  // waiting for a reader that comes only after this process ended.
  if (::fcntl(writer.get(), F_SETFL, O_NONBLOCK) != 0) return errno_error("fcntl(O_NONBLOCK)");
  const std::vector<int> listeners = runtime.listening_sockets();
  KIB_TRY(send_listeners(writer.get(), listeners));
  KIB_TRY(send_handover(writer.get(), "released"));
  runtime.stop_accepting();
  send_relays(std::move(writer), runtime, timeout, "restart");
  const int fd = stored.get();
  const std::string state = std::string("FDSTORE=1\nFDPOLL=0\nFDNAME=") + kFdStoreName;
  const int rc = sd_pid_notify_with_fds(0, 0, state.c_str(), &fd, 1);
  if (rc <= 0) return errno_error("restart: FDSTORE=1", rc < 0 ? -rc : EINVAL, Code::unavailable);
  // Exiting before systemd took the socket would close it with what it carries.
  if (const int b = sd_notify_barrier(0, 5'000'000); b < 0)
    spdlog::warn("restart: systemd did not confirm the store: {}", std::strerror(-b));
  spdlog::info("restart: {} listeners and the plain relays are in systemd's fd store for the next agent",
               listeners.size());
  return {};
}

std::optional<UniqueFd> restore_from_fd_store() {
  char** names = nullptr;
  const int n = sd_listen_fds_with_names(1, &names);
  std::optional<UniqueFd> stored;
  for (int i = 0; i < n; ++i) {
    UniqueFd fd(SD_LISTEN_FDS_START + i);
    const std::string name = names != nullptr && names[i] != nullptr ? names[i] : "";
    if (name == kFdStoreName && !stored)
      stored = std::move(fd);
    else
      spdlog::warn("restart: closing fd {} (\"{}\") that systemd passed: not one this agent stores", fd.get(), name);
  }
  free_names(names);
  if (!stored) return std::nullopt;
  // Ours now: the next start must not be given it again.
  const std::string remove = std::string("FDSTOREREMOVE=1\nFDNAME=") + kFdStoreName;
  if (sd_pid_notify(0, 0, remove.c_str()) <= 0) spdlog::warn("restart: could not take the socket out of the store");
  size_t listeners = 0;
  auto next = receive_listeners(stored->get(), std::chrono::seconds(5), listeners);
  if (!next.ok() || next->op != "released") {
    spdlog::warn("restart: cannot read what the previous agent stored ({}); starting cold, its connections close",
                 next.ok() ? "\"" + next->op + "\" where \"released\" belongs" : next.error().message);
    return std::nullopt;
  }
  spdlog::info("restart: {} Workspace listeners came from systemd's fd store", listeners);
  return stored;
}

}  // namespace kib::daemon
