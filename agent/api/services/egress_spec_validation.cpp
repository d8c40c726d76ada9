#include "agent/api/services/egress_spec_validation.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "agent/common/openssl_ptr.h"
#include "agent/policy/endpoint.h"
#include "agent/policy/endpoint_check.h"

namespace kib::api {
namespace {

Error invalid(std::string field, std::string what) {
  return Error{Code::invalid_argument, std::move(field) + ": " + std::move(what)};
}

Status prefixed(Status s, const std::string& field) {
  if (s.ok()) return s;
  return invalid(field, s.error().message);
}

// The create/update endpoint rule has one implementation, in agent/policy.
Status check_endpoint(const std::string& address, const policy::EndpointAddressPolicy& policy,
                      const ResolveFn& resolve) {
  const std::string field = "spec.socks5.address";
  auto hp = policy::parse_host_port(address);
  if (!hp.ok()) return invalid(field, hp.error().message);
  return prefixed(policy::check_endpoint_address(*hp, policy, resolve), field);
}

Status check_credentials(const ctrl::Socks5Egress& s) {
  if (s.username().size() > kMaxCredentialBytes) return invalid("spec.socks5.username", "longer than 255 bytes");
  if (s.password().size() > kMaxCredentialBytes) return invalid("spec.socks5.password", "longer than 255 bytes");
  if (s.username().empty() != s.password().empty())
    return invalid("spec.socks5", "username and password must be given together (RFC 1929)");
  return {};
}

Status check_server_name(const std::string& name) {
  if (name.empty()) return {};  // "Empty selects the host of the endpoint address."
  if (policy::IpAddress::parse(name).ok()) return {};
  auto hp = policy::parse_host_port(name + ":1");
  if (!hp.ok() || hp->ip) return invalid("spec.socks5.tls.server_name", "not a hostname or IP address");
  return {};
}

}  // namespace

Status validate_ca_cert(const std::string& pem) {
  const std::string field = "spec.socks5.tls.ca_cert";
  if (pem.size() > kMaxCaCertBytes) return invalid(field, "larger than 64 KiB");
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Error{Code::internal, "out of memory"};
  ERR_clear_error();
  size_t count = 0;
  for (;;) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert) {
      ++count;
      continue;
    }
    unsigned long err = ERR_peek_last_error();
    ERR_clear_error();
    // The end of the input is "no start line"; anything else is a malformed block.
    bool at_end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
    if (!at_end) return invalid(field, "malformed PEM certificate #" + std::to_string(count + 1));
    break;
  }
  if (count == 0) return invalid(field, "no PEM certificate found");
  return {};
}

Status validate_egress_spec(const ctrl::EgressSpec& spec, const policy::EndpointAddressPolicy& policy,
                            const ResolveFn& resolve) {
  if (spec.protocol_case() == ctrl::EgressSpec::PROTOCOL_NOT_SET)
    return invalid("spec", "exactly one protocol branch (socks5) is required");
  const auto& s = spec.socks5();
  KIB_TRY(check_credentials(s));
  if (s.has_tls()) {
    KIB_TRY(check_server_name(s.tls().server_name()));
    if (!s.tls().ca_cert().empty()) KIB_TRY(validate_ca_cert(s.tls().ca_cert()));
  }
  // Last: it is the only check that may wait on the network.
  return check_endpoint(s.address(), policy, resolve);
}

}  // namespace kib::api
