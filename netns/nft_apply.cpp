#include "netns/nft_apply.h"

#include <nftables/libnftables.h>

#include <memory>
#include <mutex>

#include "netns/namespace_handle.h"
#include "netns/nft_generation.h"

namespace kib::netns {
namespace {

struct NftCtxFree {
  void operator()(nft_ctx* ctx) const { nft_ctx_free(ctx); }
};
using NftCtx = std::unique_ptr<nft_ctx, NftCtxFree>;

// libnftables keeps process-wide state (its parser and cache setup); one command at a
// time across all namespaces.
std::mutex& nft_mutex() {
  static std::mutex m;
  return m;
}

std::string trim(const char* s) {
  std::string out = s ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

Result<std::string> run_here(const std::string& buffer) {
  NftCtx ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return make_error(Code::internal, "nft_ctx_new failed");
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return make_error(Code::internal, "nft: cannot buffer output");
  if (nft_run_cmd_from_buffer(ctx.get(), buffer.c_str()) != 0)
    return make_error(Code::internal, "nft: " + trim(nft_ctx_get_error_buffer(ctx.get())));
  return std::string(nft_ctx_get_output_buffer(ctx.get()));
}

}  // namespace

Result<std::string> run_nft(int ns_fd, const std::string& buffer) {
  std::lock_guard lock(nft_mutex());
  return run_in_netns<std::string>(ns_fd, [&] { return run_here(buffer); });
}

Result<std::optional<std::string>> apply_nft_and_list(int ns_fd, const std::string& buffer,
                                                      const std::string& list) {
  using Listing = std::optional<std::string>;
  std::lock_guard lock(nft_mutex());
  return run_in_netns<Listing>(ns_fd, [&]() -> Result<Listing> {
    auto before = nft_generation_here();
    KIB_TRY(run_here(buffer));
    auto applied = nft_generation_here();
    auto listed = run_here(list);
    auto after = nft_generation_here();
    const bool ours_only = before.ok() && applied.ok() && after.ok() && *applied == *before + 1 && *after == *applied;
    if (!ours_only || !listed.ok()) return Listing{};
    return Listing{std::move(*listed)};
  });
}

Status apply_nft(int ns_fd, const std::string& buffer) {
  auto r = run_nft(ns_fd, buffer);
  if (!r.ok()) return std::move(r).error();
  return {};
}

}  // namespace kib::netns
