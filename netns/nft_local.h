#pragma once
// libnftables, called in the calling thread's network namespace. Only the nftables
// helper process (nft_helper.h) calls these: libnftables waits for netlink answers
// with select(), which aborts once its socket's number reaches FD_SETSIZE, and calls
// exit() when it cannot open that socket. Neither may happen in the agent.
#include <cstdint>
#include <optional>
#include <string>

#include "agent/common/result.h"

namespace kib::netns {

// Runs an nft command buffer (one transaction); answers nft's output. The error
// carries nft's message.
Result<std::string> nft_run_here(const std::string& buffer);

// What one transaction left: the namespace's nftables generation right after it and,
// when asked for, nft's listing of it.
struct TableWrite {
  uint32_t generation = 0;
  std::optional<std::string> listing;
};

// nft_run_here(buffer), then (list not empty) nft_run_here(list). Returned only when it
// shows what this transaction left: the namespace's generation moved by exactly one
// across the apply and not at all across the listing. Otherwise nullopt.
Result<std::optional<TableWrite>> nft_write_here(const std::string& buffer, const std::string& list);

}  // namespace kib::netns
