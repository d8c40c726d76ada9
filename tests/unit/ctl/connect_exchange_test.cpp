// kibotosctl against a stand-in agent: what it sends and how it reads the answer.
#include <doctest/doctest.h>

#include <sstream>

#include "agent/ctl/ctl_main.h"
#include "fake_agent.h"

using kib::ctl::run_ctl;

TEST_CASE("a request is a Connect POST to /<service>/<method> with the proto3 JSON body") {
  FakeAgent agent({{200, R"({"egress":{"egressId":"eg-1","revision":"1"}})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "get", "eg-1", "--socket", agent.socket_path(), "-o", "json"}, out, err, nullptr) == 0);
  const auto& reqs = agent.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].path == "/kibotos.ctrl.v1.EgressService/GetEgress");
  CHECK(reqs[0].body == R"({"egressId":"eg-1"})");
  CHECK(out.str().find("\"egressId\": \"eg-1\"") != std::string::npos);
}

TEST_CASE("each write carries a fresh command ID") {
  FakeAgent agent({{200, "{}"}, {200, "{}"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "delete", "eg-1", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  CHECK(run_ctl({"egress", "delete", "eg-1", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  const auto& reqs = agent.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].body.find("\"commandId\":\"ctl-") != std::string::npos);
  CHECK(reqs[0].body != reqs[1].body);
}

TEST_CASE("list --all follows next_page_token and prints every page's items") {
  FakeAgent agent(
      {{200, R"({"egresses":[{"egressId":"a"}],"nextPageToken":"t1"})"}, {200, R"({"egresses":[{"egressId":"b"}]})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "list", "--all", "--page-size", "1", "--socket", agent.socket_path()}, out, err, nullptr) ==
        0);
  const auto& reqs = agent.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[1].body.find("\"pageToken\":\"t1\"") != std::string::npos);
  CHECK(reqs[1].body.find("\"pageSize\":1") != std::string::npos);
  CHECK(out.str().find("\na ") != std::string::npos);
  CHECK(out.str().find("\nb ") != std::string::npos);
  CHECK(out.str().find("next_page_token") == std::string::npos);
}

TEST_CASE("an error from the agent prints its code and message and exits 10 + code") {
  FakeAgent agent({{404, R"({"code":"not_found","message":"egress eg-9 not found"})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "get", "eg-9", "--socket", agent.socket_path()}, out, err, nullptr) == 15);
  CHECK(err.str() == "error: not_found: egress eg-9 not found\n");
  CHECK(out.str().empty());
}

TEST_CASE("unknown fields in an answer from a newer agent are ignored") {
  FakeAgent agent({{200, R"({"agent":{"version":"9.9.9","newField":1}})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"agent", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  CHECK(out.str().find("9.9.9") != std::string::npos);
}

TEST_CASE("a delete says what it deleted (its answer is empty); -o json prints the answer as it is") {
  FakeAgent agent({{200, "{}"}, {200, "{}"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"workspace", "delete", "ws-1", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  CHECK(out.str() == "workspace ws-1 deleted\n");
  std::ostringstream json;
  CHECK(run_ctl({"egress", "delete", "eg-1", "-ojson", "--socket", agent.socket_path()}, json, err, nullptr) == 0);
  CHECK(json.str() == "{}\n");
}

TEST_CASE("-o id prints only the resource's ID: create, get, update, delete") {
  FakeAgent agent(
      {{200, R"({"egress":{"egressId":"eg-7","revision":"1","spec":{"socks5":{"address":"1.2.3.4:1080"}}}})"},
       {200, R"({"workspace":{"workspaceId":"ws-3","netns":"/run/netns/g"}})"},
       {200, "{}"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "create", "--address", "1.2.3.4:1080", "-o", "id", "--socket", agent.socket_path()}, out,
                err, nullptr) == 0);
  CHECK(out.str() == "eg-7\n");
  std::ostringstream ws;
  CHECK(run_ctl({"workspace", "get", "ws-3", "-oid", "--socket", agent.socket_path()}, ws, err, nullptr) == 0);
  CHECK(ws.str() == "ws-3\n");
  std::ostringstream del;
  CHECK(run_ctl({"egress", "delete", "eg-7", "-o", "id", "--socket", agent.socket_path()}, del, err, nullptr) == 0);
  CHECK(del.str() == "eg-7\n");
  CHECK(err.str().empty());
}

TEST_CASE("-o id on a list prints one ID per line, every page with --all; nothing for an empty list") {
  FakeAgent agent({{200, R"({"workspaces":[{"workspaceId":"a"},{"workspaceId":"b"}],"nextPageToken":"t"})"},
                   {200, R"({"workspaces":[{"workspaceId":"c"}]})"},
                   {200, "{}"},
                   {200, R"({"connections":[{"connectionId":"17"},{"connectionId":"18"}]})"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"workspace", "list", "--all", "-o", "id", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  CHECK(out.str() == "a\nb\nc\n");
  std::ostringstream none;
  CHECK(run_ctl({"egress", "list", "-o", "id", "--socket", agent.socket_path()}, none, err, nullptr) == 0);
  CHECK(none.str().empty());
  std::ostringstream conns;
  CHECK(run_ctl({"workspace", "connections", "ws-1", "-o", "id", "--socket", agent.socket_path()}, conns, err,
                nullptr) == 0);
  CHECK(conns.str() == "17\n18\n");
}

TEST_CASE("-o id on a command whose answer has no ID is a usage error, before anything is sent") {
  FakeAgent agent({});
  for (const auto& args : {std::vector<std::string>{"agent"}, {"workspace", "status", "ws-1"}}) {
    std::vector<std::string> full = args;
    for (const char* a : {"-o", "id", "--socket"}) full.emplace_back(a);
    full.push_back(agent.socket_path());
    std::ostringstream out, err;
    CHECK(run_ctl(full, out, err, nullptr) == 2);
    CHECK(out.str().empty());
    CHECK(err.str().find("-o id: '" + args[0]) != std::string::npos);
    CHECK(err.str().find("shows no ID; use -o table, json or yaml") != std::string::npos);
  }
  CHECK(agent.requests().empty());
}

TEST_CASE("list -o json with no items prints the list as []") {
  FakeAgent agent({{200, "{}"}});
  std::ostringstream out, err;
  CHECK(run_ctl({"egress", "list", "-o", "json", "--socket", agent.socket_path()}, out, err, nullptr) == 0);
  CHECK(out.str() == "{\n  \"egresses\": []\n}\n");
}
