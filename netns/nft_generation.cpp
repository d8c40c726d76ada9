#include "netns/nft_generation.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include <optional>

#include "netns/namespace_handle.h"
#include "netns/netlink_socket.h"

namespace kib::netns {
namespace {

using NlMsg = CPtr<nlmsg_free>;

int on_generation(nl_msg* msg, void* arg) {
  nlattr* tb[NFTA_GEN_MAX + 1] = {};
  if (nlmsg_parse(nlmsg_hdr(msg), sizeof(nfgenmsg), tb, NFTA_GEN_MAX, nullptr) == 0 && tb[NFTA_GEN_ID])
    *static_cast<std::optional<uint32_t>*>(arg) = ntohl(nla_get_u32(tb[NFTA_GEN_ID]));
  return NL_OK;
}

}  // namespace

Result<uint32_t> nft_generation_here() {
  auto sk = connect_netlink(NETLINK_NETFILTER);
  if (!sk.ok()) return std::move(sk).error();
  NlMsg msg(nlmsg_alloc_simple((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN, NLM_F_REQUEST));
  if (!msg) return make_error(Code::resource_exhausted, "nlmsg_alloc failed");
  nfgenmsg head{};
  head.nfgen_family = AF_UNSPEC;
  head.version = NFNETLINK_V0;
  if (int err = nlmsg_append(msg.get(), &head, sizeof head, NLMSG_ALIGNTO); err < 0)
    return nl_error("nftables generation request", err);
  std::optional<uint32_t> gen;
  nl_socket_modify_cb(sk->get(), NL_CB_VALID, NL_CB_CUSTOM, on_generation, &gen);
  if (int err = nl_send_auto(sk->get(), msg.get()); err < 0) return nl_error("nftables generation request", err);
  if (int err = nl_recvmsgs_default(sk->get()); err < 0) return nl_error("nftables generation reply", err);
  if (!gen) return make_error(Code::internal, "nftables generation reply without NFTA_GEN_ID");
  return *gen;
}

Result<uint32_t> nft_generation(int ns_fd) { return run_in_netns<uint32_t>(ns_fd, nft_generation_here); }

}  // namespace kib::netns
