#include "agent/ctl/egress_update.h"

#include <initializer_list>
#include <string_view>

namespace kib::ctl {
namespace {

bool given(const Invocation& inv, std::string_view flag) {
  for (const auto& [f, v] : inv.values)
    if (f->name == flag) return true;
  return false;
}

Error usage(std::string message) { return Error{Code::invalid_argument, std::move(message)}; }

// --no-X against the flags that set X.
Status exclusive(const Invocation& inv, std::string_view off, std::initializer_list<std::string_view> on) {
  if (!given(inv, off)) return {};
  for (std::string_view f : on)
    if (given(inv, f)) return usage("--" + std::string(off) + " and --" + std::string(f) + " contradict each other");
  return {};
}

}  // namespace

Status check_egress_update_flags(const Invocation& inv) {
  KIB_TRY(exclusive(inv, "no-credentials", {"username", "password-file"}));
  KIB_TRY(exclusive(inv, "no-tls", {"tls", "server-name", "ca-cert"}));
  KIB_TRY(exclusive(inv, "no-udp", {"udp-enabled"}));
  if (given(inv, "replace") && !given(inv, "address"))
    return usage("--replace sends the spec exactly as given, so it needs --address");
  if (given(inv, "username") && !given(inv, "password-file") && !given(inv, "replace"))
    return usage("--username needs --password-file: the agent never returns the password, so an update sends it again");
  return {};
}

bool egress_update_needs_current(const Invocation& inv) {
  return !(given(inv, "replace") && given(inv, "expected-revision"));
}

Status keep_unstated(const Invocation& inv, const kibotos::ctrl::v1::Egress& current,
                     kibotos::ctrl::v1::UpdateEgressRequest& req) {
  if (!given(inv, "expected-revision")) req.set_expected_revision(current.revision());
  if (given(inv, "replace")) return {};
  const auto& cur = current.spec();
  const auto& c5 = cur.socks5();
  auto* spec = req.mutable_spec();
  auto* s5 = spec->mutable_socks5();
  if (!given(inv, "address")) s5->set_address(c5.address());
  if (!c5.username().empty() && !given(inv, "password-file") && !given(inv, "no-credentials"))
    return usage("this update would drop the credentials of " + current.egress_id() + " (username '" + c5.username() +
                 "'), whose password the agent never returns: give it again with --password-file FILE (and "
                 "--username to change the name), remove them with --no-credentials, or send the spec exactly as "
                 "given with --replace");
  if (given(inv, "password-file") && !given(inv, "username")) s5->set_username(c5.username());
  if (c5.has_tls() && !given(inv, "no-tls")) {
    auto* tls = s5->mutable_tls();
    if (!given(inv, "server-name")) tls->set_server_name(c5.tls().server_name());
    if (!given(inv, "ca-cert")) tls->set_ca_cert(c5.tls().ca_cert());
  }
  if (!given(inv, "udp-enabled") && !given(inv, "no-udp")) spec->set_udp_enabled(cur.udp_enabled());
  return {};
}

}  // namespace kib::ctl
