#include "agent/policy/endpoint_check.h"

#include <doctest/doctest.h>

#include "tests/unit/policy/dns_responder.h"

using kib::Code;
using kib::policy::check_endpoint_address;
using kib::policy::EndpointAddressPolicy;
using kib::policy::filter_dial_targets;
using kib::policy::HostResolver;
using kib::policy::IpAddress;
using kib::policy::parse_host_port;
using kib::policy::ResolverOptions;
using kib::policy::testing::DnsResponder;
using kib::policy::testing::LoopbackUdp;

namespace {
IpAddress ip(const char* s) { return *IpAddress::parse(s); }

ResolverOptions through(const std::string& server, int timeout_ms = 3000) {
  ResolverOptions o;
  o.servers = {server};
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}
}  // namespace

// The answers below are data only: nothing is ever sent to 8.8.8.8 or 10.0.0.5.

TEST_CASE("endpoint check: an IP literal in a special-purpose range is invalid_argument") {
  LoopbackUdp silent;
  auto st =
      check_endpoint_address(*parse_host_port("10.0.0.5:1080"), EndpointAddressPolicy(), through(silent.server()));
  REQUIRE(!st.ok());
  CHECK(st.error().code == Code::invalid_argument);
  CHECK(
      check_endpoint_address(*parse_host_port("[2606:4700::1]:1080"), EndpointAddressPolicy(), through(silent.server()))
          .ok());
}

TEST_CASE("endpoint check: a host name resolving to any special-purpose address is invalid_argument") {
  DnsResponder dns("egress.test", {"8.8.8.8", "10.0.0.5"});
  auto st =
      check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(), through(dns.server()));
  REQUIRE(!st.ok());
  CHECK(st.error().code == Code::invalid_argument);
  CHECK(st.error().message.find("10.0.0.5") != std::string::npos);
}

TEST_CASE("endpoint check: a host name resolving only to allowed addresses passes") {
  DnsResponder dns("egress.test", {"8.8.8.8"});
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(), through(dns.server()))
            .ok());
}

TEST_CASE("endpoint check: exemptions apply to resolved addresses") {
  DnsResponder dns("egress.test", {"10.0.0.5"});
  auto policy = EndpointAddressPolicy::from_strings({"10.0.0.0/24"});
  REQUIRE(policy.ok());
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), *policy, through(dns.server())).ok());
}

TEST_CASE("endpoint check: a host name that does not resolve is accepted") {
  DnsResponder dns("egress.test", {"10.0.0.5"});
  CHECK(
      check_endpoint_address(*parse_host_port("other.test:1080"), EndpointAddressPolicy(), through(dns.server())).ok());
  LoopbackUdp silent;
  const auto start = std::chrono::steady_clock::now();
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(),
                               through(silent.server(), 300))
            .ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2000));
}

TEST_CASE("endpoint check: a resolver that cannot run counts as a name that does not resolve") {
  // "That check only reports a mistake early: the endpoint is checked again on every dial."
  const HostResolver broken = [](const std::string&) -> kib::Result<std::vector<IpAddress>> {
    return kib::Error{Code::unavailable, "resolver cannot run"};
  };
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(), broken).ok());
  ResolverOptions malformed;  // c-ares refuses to start on a server that is not an address
  malformed.servers = {"not-an-address"};
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(), malformed).ok());
  // An IP literal is still checked: it needs no resolver.
  CHECK(!check_endpoint_address(*parse_host_port("10.0.0.5:1080"), EndpointAddressPolicy(), broken).ok());
}

TEST_CASE("endpoint check: an IP literal is never resolved, a host name exactly once") {
  int calls = 0;
  const HostResolver counting = [&calls](const std::string&) -> kib::Result<std::vector<IpAddress>> {
    ++calls;
    return std::vector<IpAddress>{ip("8.8.8.8")};
  };
  CHECK(check_endpoint_address(*parse_host_port("8.8.4.4:1080"), EndpointAddressPolicy(), counting).ok());
  CHECK(calls == 0);
  CHECK(check_endpoint_address(*parse_host_port("egress.test:1080"), EndpointAddressPolicy(), counting).ok());
  CHECK(calls == 1);
}

TEST_CASE("dial targets: only addresses that passed the check are dialed, in order") {
  auto t = filter_dial_targets({ip("8.8.8.8"), ip("10.0.0.5"), ip("2606:4700::1"), ip("::ffff:127.0.0.1")},
                               EndpointAddressPolicy());
  REQUIRE(t.allowed.size() == 2);
  CHECK(t.allowed[0] == ip("8.8.8.8"));
  CHECK(t.allowed[1] == ip("2606:4700::1"));
  REQUIRE(t.refused.size() == 2);
  CHECK(t.refused[0].code == Code::invalid_argument);
  CHECK(t.refused[0].message.find("10.0.0.5") != std::string::npos);
  CHECK(filter_dial_targets({}, EndpointAddressPolicy()).allowed.empty());
}
