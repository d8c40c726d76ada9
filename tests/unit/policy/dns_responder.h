#pragma once
// Test helpers: loopback UDP sockets and a tiny DNS responder on 127.0.0.1 (the only
// place tests may send traffic).
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kib::policy::testing {

// A UDP socket on 127.0.0.1, random port.
struct LoopbackUdp {
  int fd = -1;
  uint16_t port = 0;
  LoopbackUdp() {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    socklen_t len = sizeof sa;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port = ntohs(sa.sin_port);
  }
  ~LoopbackUdp() { close(fd); }
  std::string server() const { return "127.0.0.1:" + std::to_string(port); }
};

// Answers A queries for `name` with `answers` (all of them); everything else gets NXDOMAIN, and
// AAAA for `name` gets an empty NOERROR (NODATA).
class DnsResponder {
 public:
  DnsResponder(std::string name, std::vector<std::string> answers) : name_(std::move(name)) {
    for (const auto& a : answers) {
      std::array<uint8_t, 4> b{};
      REQUIRE(inet_pton(AF_INET, a.c_str(), b.data()) == 1);
      answers_.push_back(b);
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~DnsResponder() {
    stop_ = true;
    thread_.join();
  }
  std::string server() const { return sock_.server(); }
  int queries() const { return queries_; }

 private:
  void serve() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // bounded however the test goes
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      pollfd p{sock_.fd, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      uint8_t q[512];
      sockaddr_storage from{};
      socklen_t flen = sizeof from;
      const ssize_t n = recvfrom(sock_.fd, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 12) continue;
      ++queries_;
      std::string reply = answer(q, static_cast<size_t>(n));
      if (!reply.empty()) sendto(sock_.fd, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), flen);
    }
  }

  std::string answer(const uint8_t* q, size_t n) {
    size_t i = 12;
    std::string qname;
    while (i < n && q[i] != 0) {
      const size_t len = q[i];
      if (i + 1 + len > n) return {};
      if (!qname.empty()) qname += '.';
      qname.append(reinterpret_cast<const char*>(q + i + 1), len);
      i += 1 + len;
    }
    if (i + 5 > n) return {};
    const uint16_t qtype = static_cast<uint16_t>(q[i + 1] << 8 | q[i + 2]);
    const size_t qend = i + 5;
    const bool known = qname == name_;
    const bool give_a = known && qtype == 1;
    std::string r(reinterpret_cast<const char*>(q), qend);  // header + question
    r[2] = static_cast<char>(0x81);                         // QR, RD
    r[3] = static_cast<char>(known ? 0x80 : 0x83);          // RA, NOERROR or NXDOMAIN
    r[6] = 0;
    r[7] = give_a ? static_cast<char>(answers_.size()) : 0;  // ANCOUNT
    r[8] = r[9] = r[10] = r[11] = 0;
    for (size_t k = 0; give_a && k < answers_.size(); ++k) {
      const uint8_t rr[] = {0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4};
      r.append(reinterpret_cast<const char*>(rr), sizeof rr);
      r.append(reinterpret_cast<const char*>(answers_[k].data()), 4);
    }
    return r;
  }

  LoopbackUdp sock_;
  std::string name_;
  std::vector<std::array<uint8_t, 4>> answers_;
  std::atomic<bool> stop_{false};
  std::atomic<int> queries_{0};
  std::thread thread_;
};

}  // namespace kib::policy::testing
