#pragma once
// Runs an nft command buffer with libnftables inside a namespace. nft applies one
// buffer as one transaction: all of it or nothing.
#include <string>

#include "agent/common/result.h"

namespace kib::netns {

// libnftables talks netlink in its caller's namespace, so the context is created and
// used on a thread that setns()'d into `ns_fd`. The error carries nft's message.
Status apply_nft(int ns_fd, const std::string& buffer);

// Same, returning nft's output (e.g. "list table inet kibotos").
Result<std::string> run_nft(int ns_fd, const std::string& buffer);

}  // namespace kib::netns
