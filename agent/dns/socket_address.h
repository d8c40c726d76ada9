#pragma once
// The DNS path names policy::SocketAddress (agent/policy/socket_address.h) in its own
// namespace: guest, asked and resolver addresses.
#include "agent/policy/socket_address.h"

namespace kib::dns {

using policy::SocketAddress;
using policy::SocketAddressHash;

}  // namespace kib::dns
