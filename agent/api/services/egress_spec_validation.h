#pragma once
// The checks CreateEgress and UpdateEgress run on an EgressSpec before storing it.
#include <string>
#include <vector>

#include "agent/api/services/service_env.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace kib::api {

inline constexpr size_t kMaxCredentialBytes = 255;  // RFC 1929
inline constexpr size_t kMaxCaCertBytes = 64 * 1024;

// invalid_argument naming the field. The endpoint goes through
// policy::check_endpoint_address with resolve: a hostname is resolved once and is
// accepted when it does not resolve or the resolver cannot run.
Status validate_egress_spec(const ::kibotos::ctrl::v1::EgressSpec& spec, const policy::EndpointAddressPolicy& policy,
                            const ResolveFn& resolve);

// ok when pem holds at least one certificate and nothing malformed.
Status validate_ca_cert(const std::string& pem);

}  // namespace kib::api
