// netns-attach-tool: attaches one namespace with a NetworkPolicy (JSON) through the
// netns library and stands in for the data plane in tests, until the real agent
// relays. Not installed.
//
//   netns-attach-tool [--loops N] [--pause-after-prepare | --adopt NOTE] NETNS_PATH POLICY_JSON
//
// With --pause-after-prepare it prints "PREPARED" once the drop-only table and the
// routing are in place and waits for a "continue" line before opening listeners.
// Prints "READY tcp=P dns_udp=Q dns_tcp=R", then one line per intercepted connection
// or datagram: "ACCEPT tcp|dns_tcp ORIG_IP ORIG_PORT PEER_IP PEER_PORT" /
// "DNS udp ORIG_IP ORIG_PORT PEER_IP PEER_PORT"; each peer is answered
// "ORIGDST ORIG_IP ORIG_PORT\n" (DNS from a transparent reply socket bound to the
// original destination). TCP connections are then held and echo "ECHO <data>" until
// the peer closes. Commands on stdin: "update POLICY_JSON" ("UPDATED tcp=P
// dns_udp=Q dns_tcp=R": DNS listeners opened for resolvers the policy gained are
// served, those of a policy without resolvers closed), "detach", "alive"
// (prints "ALIVE 1" or "ALIVE 0"), "check" ("CHECK ok" or "CHECK <what is missing>"),
// "families" ("FAMILIES [ipv4] [ipv6] [ERROR <why a live one is not enforced>]"),
// "repair" (check_routing, then reinstall when it fails: "REPAIR ok" or
// "REPAIR <what changed> -> reinstalled|<error>"), "reinstall" (writes and lists the
// table, installs the routing: "REINSTALLED" or "ERROR <why>"),
// "note" ("NOTE <cookie> <generation> <tcp> <dns_udp> <dns_tcp> <digest hex>", what a
// restarted agent may adopt, or "NOTE none"),
// and for the fd-ceiling tests: "hold-fds N" (opens N more fds: "HOLDING <highest fd>"),
// "exhaust-fds" (opens fds until EMFILE: "EXHAUSTED <count>"), "release-fds"
// ("RELEASED"), "nft-helper" ("NFT_HELPER <pid of the nftables helper, or -1>").
//
// With --adopt NOTE (a "note" answer without its "NOTE ") it adopts the namespace as an
// agent started again does (Attachment::adopt): "ADOPTED" then READY as above, or
// "NOT_ADOPTED <why>" and exit status 3.
//
//   netns-attach-tool --remove-stale NETNS_PATH
//
// removes a table, rules and routes left behind (Attachment::remove_stale) and exits.
#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "netns/attachment.h"
#include "netns/nft_helper.h"
#include "netns/policy_from_proto.h"

namespace {

using namespace kib::netns;

std::string addr_port(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    return std::string(buf) + " " + std::to_string(ntohs(s->sin_port));
  }
  auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
  return std::string(buf) + " " + std::to_string(ntohs(s->sin6_port));
}

kib::Result<RulesetPolicy> parse_policy(const std::string& json) {
  kibotos::ctrl::v1::NetworkPolicy proto;
  auto st = google::protobuf::util::JsonStringToMessage(json, &proto);
  if (!st.ok()) return kib::make_error(kib::Code::invalid_argument, "policy JSON: " + st.ToString());
  return ruleset_policy_from_proto(proto);
}

void say(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the test reads line by line
}

struct Socket {
  int fd;
  enum Kind { tcp, dns_tcp, dns_udp } kind;
};

constexpr size_t kMaxHeldConnections = 1024;

// Answers ORIGDST and keeps the connection, echoing what the peer sends ("ECHO ...")
// until it closes. Returns the connection, or -1.
int serve_tcp(int listen_fd, const char* label) {
  sockaddr_storage peer{}, orig{};
  socklen_t plen = sizeof peer, olen = sizeof orig;
  int c = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
  if (c < 0) return -1;
  // The accepted socket's local address is the guest's original destination.
  getsockname(c, reinterpret_cast<sockaddr*>(&orig), &olen);
  say(std::string("ACCEPT ") + label + " " + addr_port(orig) + " " + addr_port(peer));
  std::string reply = "ORIGDST " + addr_port(orig) + "\n";
  if (write(c, reply.data(), reply.size()) < 0) { /* the peer may be gone */
  }
  return c;
}

// False when the connection is done.
bool echo(int fd) {
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n <= 0) return false;
  std::string reply = "ECHO " + std::string(buf, static_cast<size_t>(n));
  return write(fd, reply.data(), reply.size()) == static_cast<ssize_t>(reply.size());
}

void serve_udp(int fd, int ns_fd) {
  char data[2048];
  char control[256];
  sockaddr_storage peer{};
  iovec iov{data, sizeof data};
  msghdr msg{};
  msg.msg_name = &peer;
  msg.msg_namelen = sizeof peer;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(fd, &msg, 0) < 0) return;
  sockaddr_storage orig{};
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if ((c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR) ||
        (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_ORIGDSTADDR))
      std::memcpy(&orig, CMSG_DATA(c), std::min<size_t>(c->cmsg_len - CMSG_LEN(0), sizeof orig));
  }
  say("DNS udp " + addr_port(orig) + " " + addr_port(peer));
  socklen_t olen = orig.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  auto reply_fd = open_transparent_reply_socket(ns_fd, reinterpret_cast<sockaddr*>(&orig), olen);
  if (!reply_fd.ok()) {
    say("ERROR reply socket: " + reply_fd.error().message);
    return;
  }
  std::string reply = "ORIGDST " + addr_port(orig) + "\n";
  sendto(reply_fd->get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&peer), msg.msg_namelen);
}

// Fds the tool holds on a test's command, as a busy agent holds connections.
std::vector<kib::UniqueFd>& held_fds() {
  static std::vector<kib::UniqueFd> fds;
  return fds;
}

// Opens /dev/null up to `count` times (stops at the first failure); the highest fd.
int hold_fds(size_t count) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  int highest = -1;
  for (size_t k = 0; k < count; ++k) {
    kib::UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!fd) break;
    highest = std::max(highest, fd.get());
    held_fds().push_back(std::move(fd));
  }
  return highest;
}

bool handle_fd_command(const std::string& line) {
  if (line.rfind("hold-fds ", 0) == 0) {
    say("HOLDING " + std::to_string(hold_fds(std::stoul(line.substr(9)))));
  } else if (line == "exhaust-fds") {
    // Bounded: the limit is set just above the highest fd open now, then filled.
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, static_cast<rlim_t>(highest) + 32);
    setrlimit(RLIMIT_NOFILE, &lim);
    for (kib::UniqueFd fd; (fd = kib::UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC)));)
      held_fds().push_back(std::move(fd));
    say("EXHAUSTED " + std::to_string(held_fds().size()));
  } else if (line == "release-fds") {
    held_fds().clear();
    say("RELEASED");
  } else if (line == "nft-helper") {
    say("NFT_HELPER " + std::to_string(NftHelper::instance().pid()));
  } else {
    return false;
  }
  return true;
}

std::string ports_text(const Attachment& a) {
  return "tcp=" + std::to_string(a.ports().tcp) + " dns_udp=" + std::to_string(a.ports().dns_udp) +
         " dns_tcp=" + std::to_string(a.ports().dns_tcp);
}

// The listeners the tool serves, as the data plane holds them.
struct Served {
  std::vector<Listeners> held;  // every take_listeners(): the attach's, and each update's DNS ones
  std::vector<Socket> socks;    // their fds, to poll

  void take(Attachment& a) {
    Listeners& l = held.emplace_back(a.take_listeners());
    for (auto* set : {&l.tcp, &l.dns_tcp, &l.dns_udp}) {
      Socket::Kind kind = set == &l.tcp ? Socket::tcp : set == &l.dns_tcp ? Socket::dns_tcp : Socket::dns_udp;
      for (auto* v : {&set->v4, &set->v6})
        for (auto& fd : *v) socks.push_back(Socket{fd.get(), kind});
    }
  }
  // After an update without resolvers: the table no longer points at the DNS
  // listeners, so they close (as the DNS service closes its own).
  void close_dns() {
    std::erase_if(socks, [](const Socket& s) { return s.kind != Socket::tcp; });
    for (auto& l : held) {
      l.dns_udp = ListenerSet{};
      l.dns_tcp = ListenerSet{};
    }
  }
};

std::string note_text(const std::optional<AttachNote>& n) {
  if (!n) return "none";
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(n->ruleset_digest));
  return std::to_string(n->netns_cookie) + " " + std::to_string(n->generation) + " " + std::to_string(n->ports.tcp) +
         " " + std::to_string(n->ports.dns_udp) + " " + std::to_string(n->ports.dns_tcp) + " " + digest;
}

std::optional<AttachNote> parse_note(const std::string& text) {
  AttachNote n;
  unsigned long long digest = 0;
  unsigned tcp = 0, udp = 0, dtcp = 0;
  if (std::sscanf(text.c_str(), "%lu %u %u %u %u %llx", &n.netns_cookie, &n.generation, &tcp, &udp, &dtcp, &digest) !=
      6)
    return std::nullopt;
  n.ports = TproxyPorts{static_cast<uint16_t>(tcp), static_cast<uint16_t>(udp), static_cast<uint16_t>(dtcp)};
  n.ruleset_digest = digest;
  return n;
}

// Returns false when the tool should exit.
bool handle_command(const std::string& line, Attachment& a, Served& served) {
  if (line == "detach") {
    auto st = a.detach();
    say(st.ok() ? "DETACHED" : "ERROR " + st.error().message);
    return false;
  }
  if (line == "check") {
    auto st = a.check();
    say(st.ok() ? "CHECK ok" : "CHECK " + st.error().message);
    return true;
  }
  if (line == "note") {
    say("NOTE " + note_text(a.note()));
    return true;
  }
  if (line == "alive") {
    say(std::string("ALIVE ") + (a.namespace_alive() ? "1" : "0"));
    return true;
  }
  if (line == "families") {
    std::string out = "FAMILIES";
    for (const auto& f : family_names(a.enforced_families())) out += " " + f;
    say(a.family_error().empty() ? out : out + " ERROR " + a.family_error());
    return true;
  }
  if (line == "reinstall") {
    auto st = a.reinstall();
    say(st.ok() ? "REINSTALLED" : "ERROR " + st.error().message);
    return true;
  }
  if (line == "repair") {  // what the agent's periodic repair does
    auto checked = a.check_routing();
    if (checked.ok()) {
      say("REPAIR ok");
    } else {
      auto st = a.reinstall();
      say("REPAIR " + checked.error().message + (st.ok() ? " -> reinstalled" : " -> " + st.error().message));
    }
    return true;
  }
  if (line.rfind("update ", 0) == 0) {
    auto policy = parse_policy(line.substr(7));
    kib::Status st = policy.ok() ? a.update(*policy) : kib::Status(policy.error());
    if (st.ok()) {
      served.take(a);
      if (!policy->intercept_dns) served.close_dns();
    }
    say(st.ok() ? "UPDATED " + ports_text(a) : "ERROR " + st.error().message);
    return true;
  }
  if (!handle_fd_command(line)) say("ERROR unknown command");
  return true;
}

int serve(Attachment& a);

}  // namespace

int main(int argc, char** argv) {
  unsigned loops = 1;
  bool pause = false;
  std::optional<AttachNote> adopt;
  int i = 1;
  if (argc == 3 && std::string(argv[1]) == "--remove-stale") {
    auto st = Attachment::remove_stale(argv[2], AttachParams{});
    if (!st.ok()) std::cerr << "remove-stale: " << st.error().message << "\n";
    return st.ok() ? 0 : 1;
  }
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--loops" && i + 1 < argc) {
      loops = static_cast<unsigned>(std::stoul(argv[++i]));
    } else if (arg == "--pause-after-prepare") {
      pause = true;
    } else if (arg == "--adopt" && i + 1 < argc) {
      adopt = parse_note(argv[++i]);
      if (!adopt) {
        std::cerr << "--adopt: not a note: " << argv[i] << "\n";
        return 2;
      }
    } else {
      break;
    }
  }
  if (argc - i != 2) {
    std::cerr << "usage: netns-attach-tool [--loops N] [--pause-after-prepare] NETNS_PATH POLICY_JSON\n";
    return 2;
  }
  auto policy = parse_policy(argv[i + 1]);
  if (!policy.ok()) {
    std::cerr << policy.error().message << "\n";
    return 2;
  }
  AttachParams params;
  params.policy = *policy;
  params.listeners_per_family = loops;
  if (adopt) {
    auto ns = NamespaceHandle::open(argv[i]);
    auto adopted = ns.ok() ? Attachment::adopt(std::move(*ns), params, *adopt) : kib::Result<Attachment>(ns.error());
    if (!adopted.ok()) {
      say("NOT_ADOPTED " + adopted.error().message);
      return 3;
    }
    say("ADOPTED");
    return serve(*adopted);
  }
  auto attached = Attachment::prepare(argv[i], params);
  if (!attached.ok()) {
    std::cerr << "attach: " << attached.error().message << "\n";
    return 1;
  }
  if (pause) {
    say("PREPARED");
    std::string line;
    while (std::getline(std::cin, line) && line != "continue") {
    }
  }
  if (auto st = attached->open(); !st.ok()) {
    std::cerr << "attach: " << st.error().message << "\n";
    return 1;
  }
  return serve(*attached);
}

namespace {

int serve(Attachment& a) {
  Served served;
  served.take(a);
  const std::vector<Socket>& socks = served.socks;
  say("READY " + ports_text(a));

  bool stdin_open = true;
  std::string pending;
  std::vector<kib::UniqueFd> held;
  for (;;) {
    std::vector<pollfd> pfds;
    for (const auto& s : socks) pfds.push_back(pollfd{s.fd, POLLIN, 0});
    for (const auto& c : held) pfds.push_back(pollfd{c.get(), POLLIN, 0});
    pfds.push_back(pollfd{stdin_open ? 0 : -1, POLLIN, 0});
    if (poll(pfds.data(), pfds.size(), -1) < 0) continue;
    for (size_t k = held.size(); k-- > 0;) {
      if ((pfds[socks.size() + k].revents & (POLLIN | POLLHUP | POLLERR)) && !echo(held[k].get()))
        held.erase(held.begin() + static_cast<long>(k));
    }
    for (size_t k = 0; k < socks.size(); ++k) {
      if (!(pfds[k].revents & POLLIN)) continue;
      if (socks[k].kind == Socket::dns_udp) {
        serve_udp(socks[k].fd, a.ns().fd());
        continue;
      }
      kib::UniqueFd c(serve_tcp(socks[k].fd, socks[k].kind == Socket::tcp ? "tcp" : "dns_tcp"));
      if (c && held.size() < kMaxHeldConnections) held.push_back(std::move(c));
    }
    if (pfds.back().revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t n = read(0, buf, sizeof buf);
      if (n <= 0) {
        stdin_open = false;  // keep holding the attachment until killed
        continue;
      }
      pending.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!handle_command(line, a, served)) return 0;
      }
    }
  }
}

}  // namespace
