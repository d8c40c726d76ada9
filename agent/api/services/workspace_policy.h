#pragma once
// NetworkPolicy checks for CreateWorkspace and UpdateNetworkPolicy: its shape (mode,
// routes, resolver addresses, limits) and its references to Egresses.
#include <vector>

#include "agent/store/store.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::api {

inline constexpr int kMaxRoutes = 256;
inline constexpr int kMaxDestinationsPerRoute = 256;
inline constexpr int kMaxPortRangesPerRoute = 64;
inline constexpr int kMaxResolvers = 8;

// invalid_argument naming the field: mode unspecified, a bad route or resolver.
Status validate_policy_shape(const ::kibotos::ctrl::v1::NetworkPolicy& policy);
// Every Egress a route or resolver names exists (else not_found: "a deleted resource
// is not_found to every read and every reference"), and a udp Resolver only goes
// through an Egress with udp_enabled (else failed_precondition).
Status check_policy_refs(store::Transaction& txn, const ::kibotos::ctrl::v1::NetworkPolicy& policy);
std::vector<store::EgressRef> policy_refs(const ::kibotos::ctrl::v1::NetworkPolicy& policy);

}  // namespace kib::api
