// --wait and --timeout: polling a Workspace until its policy is applied, on a clock
// the test moves.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "agent/ctl/ctl_main.h"
#include "agent/ctl/duration_arg.h"
#include "agent/ctl/policy_wait.h"
#include "fake_agent.h"

using namespace kib::ctl;
namespace v1 = kibotos::ctrl::v1;
using std::chrono::milliseconds;

namespace {

v1::Workspace workspace(uint64_t revision, uint64_t applied, const std::string& error = "") {
  v1::Workspace w;
  w.set_workspace_id("ws-1");
  w.mutable_network_policy()->set_revision(revision);
  w.mutable_network_policy_status()->set_applied_revision(applied);
  w.mutable_network_policy_status()->set_error(error);
  return w;
}

// Time passes only when the code under test sleeps.
struct FakeClock {
  std::chrono::steady_clock::time_point t{};
  WaitClock clock() {
    return {[this] { return t; }, [this](milliseconds d) { t += d; }};
  }
};

}  // namespace

TEST_CASE("--wait returns at once when the write's answer already shows the policy applied") {
  FakeClock c;
  int reads = 0;
  auto r = wait_policy_applied(
      workspace(3, 3), [&]() -> kib::Result<v1::Workspace> { return ++reads, workspace(3, 3); }, milliseconds(30000),
      c.clock());
  REQUIRE(r.ok());
  CHECK(reads == 0);
}

TEST_CASE("--wait polls until applied_revision reaches the written revision with no error") {
  FakeClock c;
  std::vector<v1::Workspace> answers = {workspace(5, 4), workspace(5, 5, "cannot install rules"), workspace(5, 5)};
  size_t reads = 0;
  auto r = wait_policy_applied(
      workspace(5, 4), [&]() -> kib::Result<v1::Workspace> { return answers.at(reads++); }, milliseconds(30000),
      c.clock());
  REQUIRE(r.ok());
  CHECK(reads == 3);
  CHECK(r->network_policy_status().applied_revision() == 5);
  CHECK(c.t.time_since_epoch() == milliseconds(250 + 500 + 1000));  // the pause doubles from 250 ms
}

TEST_CASE("--wait gives up at the timeout, naming the applied revision and the last error") {
  FakeClock c;
  int reads = 0;
  auto r = wait_policy_applied(
      workspace(5, 4),
      [&]() -> kib::Result<v1::Workspace> { return ++reads, workspace(5, 4, "netns /run/netns/g is gone"); },
      milliseconds(2000), c.clock());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kib::Code::deadline_exceeded);
  CHECK(
      r.error().message ==
      "workspace ws-1: policy revision 5 not applied within 2s: applied revision 4, error: netns /run/netns/g is gone");
  CHECK(reads == 4);  // at 0.25, 0.75, 1.75 and, the last, at the deadline
  CHECK(c.t.time_since_epoch() == milliseconds(2000));
}

TEST_CASE("--wait passes on a failed read as it is") {
  FakeClock c;
  auto r = wait_policy_applied(
      workspace(5, 4),
      []() -> kib::Result<v1::Workspace> {
        return kib::Error{kib::Code::not_found, "gone"};
      },
      milliseconds(2000), c.clock());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kib::Code::not_found);
}

TEST_CASE("--timeout takes seconds or a duration with a unit, 1s to 24h") {
  CHECK(parse_timeout_seconds("30").value() == 30);
  CHECK(parse_timeout_seconds("30s").value() == 30);
  CHECK(parse_timeout_seconds("2m").value() == 120);
  CHECK(parse_timeout_seconds("24h").value() == 86400);
  for (const char* bad : {"", "0", "0s", "25h", "86401", "1.5s", "s", "10x", "-1", "1m30s"})
    CHECK_MESSAGE(!parse_timeout_seconds(bad).ok(), bad);
}

TEST_CASE("workspace update-policy --wait polls GetWorkspace and prints the Workspace once applied") {
  char path[] = "/tmp/kibotosctl-wait-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "mode: ISOLATED\n", 15) == 15);
  ::close(fd);
  FakeAgent agent({
      {200, R"({"workspace":{"workspaceId":"ws-1","networkPolicy":{"revision":"5"},)"
            R"("networkPolicyStatus":{"appliedRevision":"4"}}})"},
      {200, R"({"workspace":{"workspaceId":"ws-1","networkPolicy":{"revision":"5"},)"
            R"("networkPolicyStatus":{"appliedRevision":"5"}}})"},
  });
  std::ostringstream out, err;
  CHECK(run_ctl({"workspace", "update-policy", "ws-1", "--expected-revision", "4", "--policy", path, "--wait",
                 "--socket", agent.socket_path()},
                out, err, nullptr) == 0);
  ::unlink(path);
  const auto& reqs = agent.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].path == "/kibotos.ctrl.v1.WorkspaceService/UpdateNetworkPolicy");
  CHECK(reqs[0].body.find("\"wait\"") == std::string::npos);  // kibotosctl's own flag is not sent
  CHECK(reqs[1].path == "/kibotos.ctrl.v1.WorkspaceService/GetWorkspace");
  CHECK(reqs[1].body == R"({"workspaceId":"ws-1"})");
  CHECK(out.str().find("ws-1") != std::string::npos);
  CHECK(out.str().find("   5                    ok ") != std::string::npos);  // APPLIED POLICY REV, STATUS
  CHECK(err.str().empty());
}

TEST_CASE("workspace create --wait with the policy applied at once reads nothing more") {
  char path[] = "/tmp/kibotosctl-wait-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "mode: ISOLATED\n", 15) == 15);
  ::close(fd);
  FakeAgent agent({{200, R"({"workspace":{"workspaceId":"ws-2","networkPolicy":{"revision":"1"},)"
                         R"("networkPolicyStatus":{"appliedRevision":"1"}}})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"workspace", "create", "--netns", "g", "--policy", path, "--wait", "-o", "id", "--socket",
                 agent.socket_path()},
                out, err, nullptr) == 0);
  ::unlink(path);
  CHECK(agent.requests().size() == 1);
  CHECK(out.str() == "ws-2\n");
}
