// The daemon's view of the config: systemd's directories as defaults, and the CIDR
// check that needs the policy library.
#include <doctest/doctest.h>

#include <cstdlib>

#include "agent/daemon/effective_config.h"

using kib::daemon::environment_defaults;
using kib::daemon::load_effective_config;

namespace {

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("STATE_DIRECTORY and RUNTIME_DIRECTORY replace the default state dir and socket") {
  ScopedEnv state("STATE_DIRECTORY", "/var/lib/kibotos-test:/var/lib/other");
  ScopedEnv runtime("RUNTIME_DIRECTORY", "/run/kibotos-test");
  auto c = environment_defaults();
  CHECK(c.state_dir == "/var/lib/kibotos-test");
  CHECK(c.api.unix_socket == "/run/kibotos-test/ctrl.sock");
}

TEST_CASE("without the systemd variables the embedded defaults stand") {
  ::unsetenv("STATE_DIRECTORY");
  ::unsetenv("RUNTIME_DIRECTORY");
  auto c = load_effective_config("");
  REQUIRE(c.ok());
  CHECK(c->state_dir == "/var/lib/kibotos");
  CHECK(c->api.unix_socket == "/run/kibotos/ctrl.sock");
}

TEST_CASE("a bad allowed_special_purpose_cidrs entry is an error naming the key and index") {
  kib::Config c;
  c.egress.allowed_special_purpose_cidrs = {"10.0.0.0/8", "10.0.0.1/8"};
  auto st = kib::daemon::check_config_cidrs(c);
  REQUIRE(!st.ok());
  CHECK(st.error().message.rfind("egress.allowed_special_purpose_cidrs[1]: ", 0) == 0);
  c.egress.allowed_special_purpose_cidrs = {"10.0.0.0/8", "fd00::/8", "192.0.2.7"};
  CHECK(kib::daemon::check_config_cidrs(c).ok());
}
