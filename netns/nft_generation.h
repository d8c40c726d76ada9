#pragma once
// The nftables ruleset generation of a namespace: the kernel bumps it with every
// committed nftables transaction there, so an unchanged one means no table in the
// namespace was touched. One netlink request, far cheaper than listing a table
// through libnftables.
#include <cstdint>

#include "agent/common/result.h"

namespace kib::netns {

Result<uint32_t> nft_generation(int ns_fd);

// The same in the calling thread's namespace (for code already running in one).
Result<uint32_t> nft_generation_here();

}  // namespace kib::netns
