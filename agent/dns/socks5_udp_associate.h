#pragma once
// The UDP ASSOCIATE command (RFC 1928 sections 4, 6 and 7) on a SOCKS5 control
// connection whose greeting and authentication are already done (the relay's SOCKS5
// client does those steps; this is the command step that follows them), and the
// relay address its reply names.
#include <cstdint>
#include <optional>
#include <string_view>

#include "agent/dns/socks5_udp_header.h"
#include "agent/policy/special_purpose.h"

namespace kib::dns {

constexpr uint8_t kSocks5Version = 5;
constexpr uint8_t kCmdUdpAssociate = 3;

// VER CMD RSV ATYP DST.ADDR DST.PORT, where DST is the address and port the client
// will send its datagrams from ("the address and port that the client expects to use
// to send UDP datagrams on for the association"); zeros when not known yet.
Bytes encode_udp_associate_request(const SocketAddress& client_udp_source);

// The RFC 1928 section 6 reply text for REP, for status and logs.
std::string_view socks5_reply_text(uint8_t rep);

struct Socks5Reply {
  uint8_t rep = 0;
  Socks5Destination bound;  // BND.ADDR, BND.PORT
};

// Reads one reply from the control connection's bytes as they arrive. feed() returns
// nullopt until the whole reply is there; then the reply and, through consumed(), how
// many of the fed bytes it took. Errors: a wrong version or address type
// (unavailable: the server does not speak SOCKS5 as we do).
class Socks5ReplyReader {
 public:
  Result<std::optional<Socks5Reply>> feed(ByteView bytes);
  size_t consumed() const { return consumed_; }

 private:
  Bytes buf_;
  size_t consumed_ = 0;
};

// The association's relay address from a successful reply: BND.ADDR:BND.PORT, where an
// unspecified BND.ADDR (0.0.0.0 or ::) means the endpoint's own address. The result
// must pass the special-purpose check like every address the agent sends to.
// rep != 0 is unavailable naming the reply; a domain BND.ADDR or port 0 is
// unavailable too (we never resolve what a server tells us).
Result<SocketAddress> relay_address_from_reply(const Socks5Reply& reply, const SocketAddress& endpoint,
                                               const policy::EndpointAddressPolicy& address_policy);

}  // namespace kib::dns
