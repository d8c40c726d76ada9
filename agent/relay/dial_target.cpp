#include "agent/relay/dial_target.h"

namespace kib::relay {

Result<DialTargetPtr> make_dial_target(EgressRevisionPtr rev, std::shared_ptr<DialTimings> timings) {
  if (!rev || !rev->spec.has_socks5()) return Error{Code::invalid_argument, "egress has no socks5 endpoint"};
  const auto& s5 = rev->spec.socks5();
  KIB_TRY_ASSIGN(auto hp, policy::parse_host_port(s5.address()));
  if (s5.username().size() > 255 || s5.password().size() > 255)
    return Error{Code::invalid_argument, "socks5 username/password longer than 255 bytes"};
  auto t = std::make_shared<DialTarget>();
  t->endpoint = std::move(hp);
  t->credentials.username = s5.username();
  t->credentials.password = s5.password();
  if (s5.has_tls()) {
    const std::string& name = s5.tls().server_name().empty() ? t->endpoint.host : s5.tls().server_name();
    KIB_TRY_ASSIGN(auto ctx, TlsClientContext::create(name, s5.tls().ca_cert()));
    t->tls = std::move(ctx);
  }
  t->revision = std::move(rev);
  t->timings = std::move(timings);
  return DialTargetPtr(std::move(t));
}

}  // namespace kib::relay
