#pragma once
// Runs an nft command buffer with libnftables inside a namespace. nft applies one
// buffer as one transaction: all of it or nothing.
#include <optional>
#include <string>

#include "agent/common/result.h"

namespace kib::netns {

// libnftables talks netlink in its caller's namespace, so the context is created and
// used on a thread that setns()'d into `ns_fd`. The error carries nft's message.
Status apply_nft(int ns_fd, const std::string& buffer);

// Same, returning nft's output (e.g. "list table inet kibotos").
Result<std::string> run_nft(int ns_fd, const std::string& buffer);

// apply_nft(buffer), then run_nft(list) on the same thread. The listing is returned
// only when it shows what this transaction left: the namespace's generation moved by
// exactly one across the apply and not at all across the listing. Otherwise (another
// transaction committed in between, or the listing failed) it is nullopt.
Result<std::optional<std::string>> apply_nft_and_list(int ns_fd, const std::string& buffer,
                                                      const std::string& list);

}  // namespace kib::netns
