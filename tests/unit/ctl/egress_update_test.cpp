// egress update against a stand-in agent: it reads the current Egress, keeps what the
// command does not restate, refuses to drop credentials silently, and sends the
// revision it read as the precondition.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "agent/ctl/ctl_main.h"
#include "fake_agent.h"
#include "kibotos/ctrl/v1/egress.pb.h"

using kib::ctl::run_ctl;
namespace v1 = kibotos::ctrl::v1;

namespace {

// An Egress with credentials, TLS (server name and CA) and UDP on, at revision 4.
const char* kCurrent =
    R"({"egress":{"egressId":"eg-1","revision":"4","spec":{"udpEnabled":true,"socks5":{"address":"192.0.2.1:1080",)"
    R"("username":"alice","tls":{"serverName":"proxy.test","caCert":"PEM"}}},"labels":{"team":"a"}}})";

const char* kUpdated = R"({"egress":{"egressId":"eg-1","revision":"5"}})";

v1::UpdateEgressRequest sent_update(const RecordedRequest& r) {
  REQUIRE(r.path == "/kibotos.ctrl.v1.EgressService/UpdateEgress");
  v1::UpdateEgressRequest req;
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.body, &req).ok());
  return req;
}

struct PasswordFile {
  PasswordFile() {
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "s3cret\n", 7) == 7);
    ::close(fd);
  }
  ~PasswordFile() { ::unlink(path); }
  char path[32] = "/tmp/kibotosctl-pw-XXXXXX";
};

int ctl(FakeAgent& agent, std::vector<std::string> args, std::ostringstream& err) {
  std::ostringstream out;
  args.insert(args.begin(), {"egress", "update", "eg-1"});
  args.insert(args.end(), {"--socket", agent.socket_path()});
  return run_ctl(args, out, err, nullptr);
}

}  // namespace

TEST_CASE("egress update refuses to drop credentials it cannot copy, and sends nothing") {
  FakeAgent agent({{200, kCurrent}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--address", "192.0.2.9:1080"}, err) == 2);
  CHECK(err.str().find("would drop the credentials of eg-1 (username 'alice')") != std::string::npos);
  for (const char* hint : {"--password-file FILE", "--no-credentials", "--replace"})
    CHECK_MESSAGE(err.str().find(hint) != std::string::npos, hint);
  REQUIRE(agent.requests().size() == 1);
  CHECK(agent.requests()[0].path == "/kibotos.ctrl.v1.EgressService/GetEgress");
}

TEST_CASE("egress update with the password again keeps username, TLS and UDP, and expects the revision it read") {
  PasswordFile pw;
  FakeAgent agent({{200, kCurrent}, {200, kUpdated}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--address", "192.0.2.9:1080", "--password-file", pw.path}, err) == 0);
  REQUIRE(agent.requests().size() == 2);
  const auto req = sent_update(agent.requests()[1]);
  CHECK(req.expected_revision() == 4);
  CHECK(req.spec().socks5().address() == "192.0.2.9:1080");
  CHECK(req.spec().socks5().username() == "alice");
  CHECK(req.spec().socks5().password() == "s3cret");
  CHECK(req.spec().socks5().tls().server_name() == "proxy.test");
  CHECK(req.spec().socks5().tls().ca_cert() == "PEM");
  CHECK(req.spec().udp_enabled());
}

TEST_CASE("egress update keeps the address when only other settings change; a given TLS setting wins") {
  FakeAgent agent({{200, kCurrent}, {200, kUpdated}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--no-credentials", "--server-name", "other.test"}, err) == 0);
  const auto req = sent_update(agent.requests().at(1));
  CHECK(req.spec().socks5().address() == "192.0.2.1:1080");
  CHECK(req.spec().socks5().username().empty());
  CHECK(req.spec().socks5().tls().server_name() == "other.test");
  CHECK(req.spec().socks5().tls().ca_cert() == "PEM");
}

TEST_CASE("egress update --no-credentials --no-tls --no-udp drops each on purpose") {
  FakeAgent agent({{200, kCurrent}, {200, kUpdated}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--address", "192.0.2.9:1080", "--no-credentials", "--no-tls", "--no-udp"}, err) == 0);
  const auto req = sent_update(agent.requests().at(1));
  CHECK(req.spec().socks5().username().empty());
  CHECK_FALSE(req.spec().socks5().has_tls());
  CHECK_FALSE(req.spec().udp_enabled());
  CHECK(req.expected_revision() == 4);
  CHECK(agent.requests()[1].body.find("wait") == std::string::npos);
}

TEST_CASE("egress update --replace with --expected-revision sends the spec as given, without reading first") {
  FakeAgent agent({{200, kUpdated}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--replace", "--expected-revision", "4", "--address", "192.0.2.9:1080"}, err) == 0);
  REQUIRE(agent.requests().size() == 1);
  const auto req = sent_update(agent.requests()[0]);
  CHECK(req.expected_revision() == 4);
  CHECK(req.spec().socks5().username().empty());
  CHECK_FALSE(req.spec().socks5().has_tls());
  CHECK_FALSE(req.spec().udp_enabled());
}

TEST_CASE("egress update: contradicting flags are usage errors before anything is sent") {
  FakeAgent agent({});
  for (const auto& args : {std::vector<std::string>{"--no-tls", "--tls"},
                           {"--no-udp", "--udp-enabled"},
                           {"--no-credentials", "--username", "bob"},
                           {"--replace"},
                           {"--username", "bob"}}) {
    std::ostringstream err;
    CHECK(ctl(agent, args, err) == 2);
    CHECK_MESSAGE(err.str().rfind("error: invalid_argument: --", 0) == 0, err.str());
  }
  CHECK(agent.requests().empty());
}

TEST_CASE("egress update: a failed read of the current Egress is the agent's error") {
  FakeAgent agent({{404, R"({"code":"not_found","message":"egress eg-1 not found"})"}});
  std::ostringstream err;
  CHECK(ctl(agent, {"--address", "192.0.2.9:1080"}, err) == 15);
  CHECK(err.str() == "error: not_found: egress eg-1 not found\n");
}
