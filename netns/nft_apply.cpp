#include "netns/nft_apply.h"

#include "netns/nft_helper.h"

namespace kib::netns {

Result<std::string> run_nft(int ns_fd, const std::string& buffer) {
  auto reply = NftHelper::instance().call(ns_fd, NftRequest{NftOp::run, buffer, {}});
  if (!reply.ok()) return std::move(reply).error();
  if (!reply->status.ok()) return std::move(reply->status).error();
  return reply->output.value_or(std::string());
}

Result<std::optional<TableWrite>> write_nft(int ns_fd, const std::string& buffer, const std::string& list) {
  auto reply = NftHelper::instance().call(ns_fd, NftRequest{NftOp::write, buffer, list});
  if (!reply.ok()) return std::move(reply).error();
  if (!reply->status.ok()) return std::move(reply->status).error();
  if (!reply->generation || (!list.empty() && !reply->output)) return std::optional<TableWrite>{};
  return std::optional<TableWrite>{TableWrite{*reply->generation, std::move(reply->output)}};
}

Status apply_nft(int ns_fd, const std::string& buffer) {
  auto r = run_nft(ns_fd, buffer);
  if (!r.ok()) return std::move(r).error();
  return {};
}

}  // namespace kib::netns
