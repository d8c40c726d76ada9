#pragma once
// Take-over: a new agent process (`kibotos-agent --take-over`) takes the API and the
// store from the running one, which keeps relaying the connections it has until they
// end or restart.drain_seconds pass. The running agent serves
// "<state_dir>/handover.sock" (SOCK_SEQPACKET, mode 0600); one datagram a message:
//
//   new -> old  "kibotos-handover 2 take-over <API sockets>"
//   old -> new  "kibotos-handover 2 released"  + SCM_RIGHTS: the API's Unix socket,
//               its lock and (when configured) the TLS socket. Sent once the old
//               agent stopped taking API calls (each call it was serving finished)
//               and closed its store.
//            or "kibotos-handover 2 refused <reason>": nothing changed on its side.
//   new -> old  "kibotos-handover 2 ready" once it serves: the old agent then closes
//               its Workspace listeners (the new agent's joined their SO_REUSEPORT
//               groups, and queued connections move over: tcp_migrate_req) and moves
//               out its established plain relays:
//   old -> new  "kibotos-handover 2 connection <fields>\n<bytes>" + SCM_RIGHTS, one a
//               relay (moved_connection_wire.h), then
//   old -> new  "kibotos-handover 2 moved <count>": the rest (TLS relays, dials) stay
//               with the old agent until they end or restart.drain_timeout passes.
//
// A peer speaking another version gets "refused" before anything changes, so an
// upgrade or a downgrade between versions that cannot hand over ends in a clean
// refusal, and the caller restarts cold.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::daemon {

// 1: API, store and listeners; 2: plain relays move too.
inline constexpr int kHandoverVersion = 2;

std::string handover_socket_path(const std::string& state_dir);

// One message: its words after the magic and version, the bytes after its first line,
// and the fds it carried.
struct HandoverMessage {
  std::string op;      // take-over, released, refused, ready, connection, moved
  std::string detail;  // the rest of the first line (refused: the reason)
  std::string payload;
  std::vector<UniqueFd> fds;
};

// The largest message (a moved relay's unsent bytes: two provided buffers at most).
inline constexpr size_t kMaxHandoverMessage = 512 * 1024;

// Sends op (+ detail) with fds attached, and payload after a line break.
Status send_handover(int sock, const std::string& op, const std::string& detail = {}, const std::vector<int>& fds = {},
                     const std::string& payload = {});
// Waits up to `timeout` for one message. unavailable when the peer closed or the time
// ran out; invalid_argument for anything that is not a message of our version
// (failed_precondition, naming both versions, for another version).
Result<HandoverMessage> receive_handover(int sock, std::chrono::milliseconds timeout);

// The running agent's side: a listening socket whose connections ask to take over.
class HandoverListener {
 public:
  // Replaces a stale socket file (the state-dir lock says no other agent runs).
  static Result<HandoverListener> open(const std::string& state_dir);
  HandoverListener(HandoverListener&&) = default;
  HandoverListener& operator=(HandoverListener&&) = default;
  ~HandoverListener();

  int fd() const { return fd_.get(); }
  // One waiting connection (non-blocking accept; invalid when none).
  UniqueFd accept() const;
  // Closes the socket and removes its file, so that the next agent can serve it.
  void close();

 private:
  HandoverListener() = default;
  std::string path_;
  UniqueFd fd_;
};

// The new agent's side: connects to the running agent. nullopt when none serves the
// socket (nothing to take over: a cold start).
Result<std::optional<UniqueFd>> connect_handover(const std::string& state_dir);

}  // namespace kib::daemon
