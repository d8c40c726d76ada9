// Error texts of netlink requests name the operation and the errno in words a person
// can act on: libnl's own code ("No Access") is translated back to the errno, and the
// kernel's errno and extended ACK message are used when the socket recorded them.
#include <doctest/doctest.h>
#include <netlink/route/link.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "netns/netlink_socket.h"
#include "netns/policy_routing.h"

using namespace kib;
using namespace kib::netns;

TEST_CASE("a libnl code is reported as the errno it stands for, by description and name") {
  Error e = nl_error("add local route ipv6", -NLE_NOACCESS);
  CHECK(e.message == "add local route ipv6: Permission denied (EACCES)");
  CHECK(e.code == Code::internal);
  CHECK(nl_error("delete fwmark rule ipv4", -NLE_OBJ_NOTFOUND).message ==
        "delete fwmark rule ipv4: No such file or directory (ENOENT)");
}

TEST_CASE("the kernel's errno and extended ACK message are used when recorded for the request") {
  NlKernelError kernel{EACCES, "IPv6 is disabled on nexthop device"};
  CHECK(nl_error("add local route ipv6", -NLE_NOACCESS, &kernel).message ==
        "add local route ipv6: Permission denied (EACCES): IPv6 is disabled on nexthop device");
  // libnl folds ENOBUFS into NLE_NOMEM: the recorded errno is the exact one.
  NlKernelError nobufs{ENOBUFS, ""};
  Error e = nl_error("list routes", -NLE_NOMEM, &nobufs);
  CHECK(e.message == "list routes: No buffer space available (ENOBUFS)");
  CHECK(e.code == Code::resource_exhausted);
}

TEST_CASE("a recorded answer to another request is not misreported") {
  NlKernelError earlier{EEXIST, "File exists"};
  CHECK(nl_error("add local route ipv4", -NLE_NOACCESS, &earlier).message ==
        "add local route ipv4: Permission denied (EACCES)");
}

TEST_CASE("libnl's own conditions keep libnl's text") {
  CHECK(nl_error("list rules", -NLE_MSG_TRUNC).message == std::string("list rules: ") + nl_geterror(NLE_MSG_TRUNC));
}

TEST_CASE("a real kernel refusal is recorded with its errno") {
  auto sk = connect_netlink(NETLINK_ROUTE);
  REQUIRE(sk.ok());
  NlKernelError kernel;
  capture_kernel_errors(sk->get(), &kernel);
  // Deleting an interface index nobody has: refused (ENODEV as root, EPERM without
  // CAP_NET_ADMIN), so nothing changes on the host.
  CPtr<rtnl_link_put> link(rtnl_link_alloc());
  REQUIRE(link);
  rtnl_link_set_ifindex(link.get(), 0x7ffffff0);
  int err = rtnl_link_delete(sk->get(), link.get());
  REQUIRE(err < 0);
  REQUIRE((kernel.error == ENODEV || kernel.error == EPERM));
  std::string expected =
      std::string("delete link: ") + std::strerror(kernel.error) + " (" + strerrorname_np(kernel.error) + ")";
  CHECK(nl_error("delete link", err, &kernel).message.rfind(expected, 0) == 0);
}

TEST_CASE("family names list the enforced families in order") {
  CHECK(family_names(Families{true, true}) == std::vector<std::string>{"ipv4", "ipv6"});
  CHECK(family_names(Families{true, false}) == std::vector<std::string>{"ipv4"});
  CHECK(family_names(Families{false, true}) == std::vector<std::string>{"ipv6"});
  CHECK(family_names(Families{}).empty());
}
