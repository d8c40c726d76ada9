#pragma once
// Whether an Egress's SOCKS5 server reads the requests a client sends together with
// its greeting (RFC 1928 does not say a client must wait for each reply; many servers
// read message by message, e.g. dante; some read one message per recv() and drop the
// rest, e.g. microsocks 1.0.3, whose client then waits for ever). Pipelined, a dial
// costs one round trip to the server less.
//
// The probe is one connection to the endpoint (resolved and checked as a dial is)
// sending, in one segment, the greeting, the credentials if any, and a CONNECT to
// 0.0.0.0:0, which no server can carry out: it refuses it without any traffic
// leaving its host. A reply to that CONNECT, whatever its code, means the server read
// it. Blocking: the caller is a thread of its own.
#include <chrono>
#include <stop_token>

#include "agent/common/result.h"
#include "agent/policy/endpoint_check.h"
#include "agent/policy/name_resolver.h"
#include "agent/relay/dial_target.h"
#include "agent/relay/egress_dial.h"

namespace kib::relay {

struct ProbeOptions {
  policy::EndpointAddressPolicy address_policy;
  policy::ResolverOptions resolver;
  std::chrono::milliseconds timeout{3000};  // for the connect, and for the replies
};

// How far one probe of an Egress's server got (socks5_server_probe): the dial every
// connection makes, driven by blocking calls, with a CONNECT to 0.0.0.0:0 that the
// server refuses without traffic leaving its host.
struct ProbeResult {
  bool connected = false;                                 // a TCP connection to an endpoint address
  bool tls_verified = false;                              // the TLS handshake (verification included) succeeded
  bool request_answered = false;                          // the server answered the CONNECT: a whole SOCKS5 exchange
  EgressDial::Stage failed_in = EgressDial::Stage::done;  // where it stopped, when not answered
  std::string failure;                                    // why it stopped, when not answered
};
// pipelined: the greeting, credentials and CONNECT go out at once. An Error only when
// stopped (or poll failed).
Result<ProbeResult> probe_socks5_server(const DialTarget& target, const ProbeOptions& options, bool pipelined,
                                        std::stop_token stop);

// true: the server answered the CONNECT sent with its greeting; false: it answered
// the greeting only (then waited or closed). An Error when it could not be asked:
// a TLS Egress (not probed), no address to dial, connect failed, or `stop` was
// requested.
Result<bool> probe_socks5_pipelining(const DialTarget& target, const ProbeOptions& options, std::stop_token stop);

}  // namespace kib::relay
