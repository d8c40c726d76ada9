#include "agent/daemon/relay_handover.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

#include "agent/daemon/handover.h"
#include "agent/daemon/moved_connection_wire.h"

namespace kib::daemon {
namespace {

int64_t ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

// The old agent's connection to the new one, shared with the data-plane threads that
// hand relays to it (one may still come after send_relays gave up waiting).
class RelayChannel {
 public:
  explicit RelayChannel(UniqueFd peer) : peer_(std::move(peer)) {}

  void send(MovedConnection c) {
    std::lock_guard lk(mu_);
    if (peer_) {
      const MovedConnectionMessage m = encode_moved(c);
      const Status st = send_handover(peer_.get(), "connection", m.detail, m.fds, m.payload);
      if (st.ok()) {
        ++sent_;
        return;  // the new agent holds the sockets now; closing ours here is harmless
      }
      spdlog::error("take-over: cannot send a relay ({}); resetting the rest", st.error().message);
      peer_.reset();
    }
    c.relay.reset();
  }

  void finish(std::chrono::steady_clock::time_point since) {
    std::lock_guard lk(mu_);
    if (!peer_) return;
    if (auto st = send_handover(peer_.get(), "moved", std::to_string(sent_)); !st.ok())
      spdlog::warn("take-over: {}", st.error().message);
    spdlog::info("take-over: moved {} relayed connections to the new agent in {} ms", sent_, ms_since(since));
    peer_.reset();
  }

 private:
  std::mutex mu_;
  UniqueFd peer_;
  size_t sent_ = 0;
};

}  // namespace

void send_relays(UniqueFd peer, Runtime& runtime, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto channel = std::make_shared<RelayChannel>(std::move(peer));
  runtime.move_connections([channel](MovedConnection c) { channel->send(std::move(c)); }, timeout);
  channel->finish(start);
}

size_t receive_relays(int peer, Runtime& runtime) {
  const auto start = std::chrono::steady_clock::now();
  size_t adopted = 0;
  for (;;) {
    auto m = receive_handover(peer, std::chrono::seconds(30));
    if (!m.ok()) {
      spdlog::warn("take-over: the old agent stopped moving relays ({}); {} adopted", m.error().message, adopted);
      return adopted;
    }
    if (m->op == "moved") {
      spdlog::info("take-over: adopted {} relayed connections (the old agent moved {}) in {} ms", adopted, m->detail,
                   ms_since(start));
      return adopted;
    }
    auto c = decode_moved(std::move(m).value());
    if (!c.ok()) {
      spdlog::error("take-over: {}", c.error().message);
      continue;
    }
    runtime.adopt_connection(std::move(c).value());
    ++adopted;
  }
}

}  // namespace kib::daemon
