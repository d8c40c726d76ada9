#pragma once
// Transparent sockets (IP_TRANSPARENT) opened inside a Workspace namespace: the TCP
// listeners TPROXY delivers covered connections to, and the UDP sockets it delivers
// intercepted DNS to. They are created on a thread that setns()'d into the namespace
// and stay in it; the data plane uses them from the host namespace.
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"

namespace kib::netns {

enum class Transport { tcp, udp };

// `count` sockets per family sharing one port through SO_REUSEPORT (one per
// data-plane loop that accepts for the Workspace): v4 bound to 0.0.0.0:port, v6
// to [::]:port with IPV6_V6ONLY.
// v6 is empty on a kernel without IPv6; IPv6 turned off by sysctl in the namespace
// (disable_ipv6) does not keep the v6 sockets from opening, so they are there when
// it is turned on later.
// Non-blocking, CLOEXEC. TCP sockets are listening. UDP sockets report each
// datagram's original destination (IP_RECVORIGDSTADDR / IPV6_RECVORIGDSTADDR).
struct ListenerSet {
  uint16_t port = 0;
  std::vector<UniqueFd> v4;
  std::vector<UniqueFd> v6;
};

// The port is chosen by the kernel for the first socket (bind to port 0) and reused
// for its siblings. congestion_control (TCP only; empty: the namespace's default) is
// set on the listeners, and accepted sockets inherit it.
Result<ListenerSet> open_transparent_listeners(int ns_fd, Transport transport, unsigned count,
                                               const std::string& congestion_control = {});

// The same in the calling thread's namespace, on `port` (0: one the kernel picks);
// aborted when a given port is taken.
Result<ListenerSet> open_transparent_listeners_here(Transport transport, unsigned count,
                                                    const std::string& congestion_control, uint16_t port);

// Whether this kernel lets the agent set TCP congestion control `name` on a socket
// (TCP_CONGESTION): invalid_argument naming it when not.
Status check_tcp_congestion_control(const std::string& name);

// A transparent UDP socket bound to `local` (a guest's original DNS destination), so
// an answer leaves from the address and port the guest asked. Non-blocking, CLOEXEC.
Result<UniqueFd> open_transparent_reply_socket(int ns_fd, const sockaddr* local, socklen_t len);

}  // namespace kib::netns
