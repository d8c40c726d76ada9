// The access log: its JSON line, and the writer's rate limit with the count of drops.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/dataplane/access_log.h"

using kib::dataplane::AccessLog;
using kib::dataplane::AccessRecord;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

template <typename P>
bool wait_until(P pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string temp_path() {
  char tmpl[] = "/tmp/kib-access-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  return tmpl;
}

}  // namespace

TEST_CASE("access log line: every field, JSON-escaped; the dial's cause and error only when it failed") {
  AccessRecord r;
  r.closed_at = std::chrono::system_clock::time_point(std::chrono::microseconds(1796605323123456));
  r.workspace_id = "ws-1";
  r.egress_id = "eg-1";
  r.egress_revision = 3;
  r.guest = "10.0.0.2:40000";
  r.destination = "[2001:db8::1]:443";
  r.duration_ms = 1500;
  r.bytes_from_guest = 7;
  r.bytes_to_guest = 9;
  r.reason = kib::relay::CloseReason::upstream_closed;
  CHECK(kib::dataplane::access_log_line(r) ==
        "{\"time\":\"2026-12-07T01:02:03.123456Z\",\"workspace_id\":\"ws-1\",\"egress_id\":\"eg-1\","
        "\"egress_revision\":3,\"guest\":\"10.0.0.2:40000\",\"destination\":\"[2001:db8::1]:443\","
        "\"duration_ms\":1500,\"bytes_from_guest\":7,\"bytes_to_guest\":9,\"close_reason\":\"upstream_closed\"}\n");
  r.reason = kib::relay::CloseReason::dial_failed;
  r.dial_cause = "tls";
  r.error = "tls: \"bad\"\ncert";
  const std::string line = kib::dataplane::access_log_line(r);
  CHECK(
      line.find(",\"close_reason\":\"dial_failed\",\"dial_cause\":\"tls\",\"error\":\"tls: \\\"bad\\\"\\ncert\"}\n") !=
      std::string::npos);
  CHECK(line.find('\n') == line.size() - 1);  // one line, whatever the error held
}

TEST_CASE("access log: lines beyond the rate are dropped, counted, and reported by the next line written") {
  const std::string path = temp_path();
  {
    auto log = AccessLog::open(path, 3);
    REQUIRE(log.ok());
    for (int i = 0; i < 5; ++i) (*log)->write("{\"n\":" + std::to_string(i) + "}\n");
    REQUIRE(wait_until([&] { return (*log)->written() == 3; }));
    CHECK((*log)->dropped() == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the next second's budget
    (*log)->write("{\"n\":5}\n");
    REQUIRE(wait_until([&] { return (*log)->written() == 5; }));
  }
  CHECK(read_file(path) == "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"dropped\":2}\n{\"n\":5}\n");
  unlink(path.c_str());
}

TEST_CASE("access log: a path that cannot be opened is an error naming the key") {
  auto log = AccessLog::open("/nonexistent-dir/access.log", 10);
  REQUIRE_FALSE(log.ok());
  CHECK(log.error().message.find("log.access.path: open /nonexistent-dir/access.log") == 0);
}
