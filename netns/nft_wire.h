#pragma once
// The frames between the agent and its nftables helper process (nft_helper.h) over a
// Unix stream socket: a request carries the namespace fd (SCM_RIGHTS) and nft
// command text, a reply carries a status and nft's output. Both ends are the same
// binary, so the layout needs no versioning.
#include <cstdint>
#include <optional>
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::netns {

enum class NftOp : uint32_t {
  run = 1,    // run `text`, answer nft's output
  write = 2,  // apply `text`, then list `list` if not empty (write_nft's rules)
};

struct NftRequest {
  NftOp op = NftOp::run;
  std::string text;
  std::string list;
};

struct NftReply {
  Status status;                       // the error is nft's (or setns'), code included
  std::optional<std::string> output;   // run: always on success; write: the listing, if asked and trusted
  std::optional<uint32_t> generation;  // write: the generation right after it, if trusted
};

// Blocking; an error names what failed (unavailable when the peer is gone).
Status send_nft_request(int sock, int ns_fd, const NftRequest& req);
// The received namespace fd is CLOEXEC and owned by the caller.
Result<std::pair<UniqueFd, NftRequest>> recv_nft_request(int sock);
Status send_nft_reply(int sock, const NftReply& reply);
Result<NftReply> recv_nft_reply(int sock);

}  // namespace kib::netns
