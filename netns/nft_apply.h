#pragma once
// Runs an nft command buffer with libnftables inside a namespace, through the
// agent's nftables helper process (nft_helper.h: libnftables must not run in the
// agent). nft applies one buffer as one transaction: all of it or nothing.
#include <optional>
#include <string>

#include "agent/common/result.h"
#include "netns/nft_local.h"

namespace kib::netns {

// The helper moves into `ns_fd`'s namespace for the call. The error carries nft's
// message, or resource_exhausted when no helper could be started (out of fds).
Status apply_nft(int ns_fd, const std::string& buffer);

// Same, returning nft's output (e.g. "list table inet kibotos").
Result<std::string> run_nft(int ns_fd, const std::string& buffer);

// apply_nft(buffer), then (list not empty) run_nft(list) in the same helper call:
// the generation right after the transaction, and the listing. Returned only when it
// shows what this transaction left: the namespace's generation moved by exactly one
// across the apply and not at all across the listing. Otherwise (another transaction
// committed in between, or the listing failed) it is nullopt.
Result<std::optional<TableWrite>> write_nft(int ns_fd, const std::string& buffer, const std::string& list);

}  // namespace kib::netns
