#include "agent/daemon/relay_handover.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "agent/daemon/handover.h"
#include "agent/daemon/moved_connection_wire.h"
#include "netns/inherited_listeners.h"

namespace kib::daemon {
namespace {

int64_t ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

// The old agent's connection to the new one, shared with the data-plane threads that
// hand relays to it (one may still come after send_relays gave up waiting).
class RelayChannel {
 public:
  RelayChannel(UniqueFd peer, std::string_view how) : peer_(std::move(peer)), how_(how) {}

  void send(MovedConnection c) {
    std::lock_guard lk(mu_);
    if (peer_) {
      const MovedConnectionMessage m = encode_moved(c);
      const Status st = send_handover(peer_.get(), "connection", m.detail, m.fds, m.payload);
      if (st.ok()) {
        ++sent_;
        return;  // the new agent holds the sockets now; closing ours here is harmless
      }
      spdlog::error("{}: cannot send a relay ({}); resetting the rest", how_, st.error().message);
      peer_.reset();
    }
    c.relay.reset();
  }

  void finish(std::chrono::steady_clock::time_point since) {
    std::lock_guard lk(mu_);
    if (!peer_) return;
    if (auto st = send_handover(peer_.get(), "moved", std::to_string(sent_)); !st.ok())
      spdlog::warn("{}: {}", how_, st.error().message);
    spdlog::info("{}: moved {} relayed connections to the new agent in {} ms", how_, sent_, ms_since(since));
    peer_.reset();
  }

 private:
  std::mutex mu_;
  UniqueFd peer_;
  std::string how_;
  size_t sent_ = 0;
};

}  // namespace

Status send_listeners(int peer, const std::vector<int>& fds) {
  constexpr size_t kPerMessage = 200;
  for (size_t i = 0; i < fds.size(); i += kPerMessage) {
    const std::vector<int> part(fds.begin() + static_cast<ptrdiff_t>(i),
                                fds.begin() + static_cast<ptrdiff_t>(std::min(fds.size(), i + kPerMessage)));
    KIB_TRY(send_handover(peer, "listeners", std::to_string(part.size()), part));
  }
  return {};
}

Result<HandoverMessage> receive_listeners(int peer, std::chrono::milliseconds timeout, size_t& count) {
  for (;;) {
    KIB_TRY_ASSIGN(auto m, receive_handover(peer, timeout));
    if (m.op != "listeners") return m;
    count += m.fds.size();
    for (auto& fd : m.fds) netns::inherit_listener(std::move(fd));
  }
}

void send_relays(UniqueFd peer, Runtime& runtime, std::chrono::milliseconds timeout, std::string_view how) {
  const auto start = std::chrono::steady_clock::now();
  auto channel = std::make_shared<RelayChannel>(std::move(peer), how);
  runtime.move_connections([channel](MovedConnection c) { channel->send(std::move(c)); }, timeout);
  channel->finish(start);
}

size_t receive_relays(int peer, Runtime& runtime, std::string_view how) {
  const auto start = std::chrono::steady_clock::now();
  size_t adopted = 0;
  for (;;) {
    auto m = receive_handover(peer, std::chrono::seconds(30));
    if (!m.ok()) {
      spdlog::warn("{}: the old agent stopped moving relays ({}); {} adopted", how, m.error().message, adopted);
      return adopted;
    }
    if (m->op == "moved") {
      spdlog::info("{}: adopted {} relayed connections (the old agent moved {}) in {} ms", how, adopted, m->detail,
                   ms_since(start));
      return adopted;
    }
    auto c = decode_moved(std::move(m).value());
    if (!c.ok()) {
      spdlog::error("{}: {}", how, c.error().message);
      continue;
    }
    runtime.adopt_connection(std::move(c).value());
    ++adopted;
  }
}

}  // namespace kib::daemon
