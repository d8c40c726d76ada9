#include "netns/nft_local.h"

#include <nftables/libnftables.h>

#include <memory>

#include "agent/common/c_ptr.h"
#include "netns/nft_generation.h"

namespace kib::netns {
namespace {

using NftCtx = CPtr<nft_ctx_free>;

std::string trim(const char* s) {
  std::string out = s ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

Result<std::string> nft_run_here(const std::string& buffer) {
  // A context per call: its netlink socket belongs to the namespace it was opened in.
  NftCtx ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return make_error(Code::internal, "nft_ctx_new failed");
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return make_error(Code::internal, "nft: cannot buffer output");
  if (nft_run_cmd_from_buffer(ctx.get(), buffer.c_str()) != 0)
    return make_error(Code::internal, "nft: " + trim(nft_ctx_get_error_buffer(ctx.get())));
  return std::string(nft_ctx_get_output_buffer(ctx.get()));
}

Result<std::optional<TableWrite>> nft_write_here(const std::string& buffer, const std::string& list) {
  using Write = std::optional<TableWrite>;
  auto before = nft_generation_here();
  KIB_TRY(nft_run_here(buffer));
  auto applied = nft_generation_here();
  if (!before.ok() || !applied.ok() || *applied != *before + 1) return Write{};
  if (list.empty()) return Write{TableWrite{*applied, std::nullopt}};
  auto listed = nft_run_here(list);
  auto after = nft_generation_here();
  if (!listed.ok() || !after.ok() || *after != *applied) return Write{};
  return Write{TableWrite{*applied, std::move(*listed)}};
}

}  // namespace kib::netns
