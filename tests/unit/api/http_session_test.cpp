// HTTP/1.1 on one connection (socketpair, no listener): keep-alive, pipelining,
// Expect: 100-continue and the body limit.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "agent/api/connect/connect_handler.h"
#include "agent/api/http/byte_stream.h"
#include "agent/api/http/connection.h"
#include "agent/api/http/deadline_stream.h"
#include "agent/common/unique_fd.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace ctrl = kibotos::ctrl::v1;
using kib::UniqueFd;
using kib::api::CallContext;

namespace {

struct Connection {
  kib::api::MethodRegistry registry;
  std::unique_ptr<kib::api::ConnectHandler> handler;
  UniqueFd client, server;
  std::thread thread;

  explicit Connection(size_t max_body = 1 << 20) {
    registry.add<ctrl::GetEgressRequest, ctrl::GetEgressResponse>(
        "kibotos.ctrl.v1.EgressService/GetEgress",
        [](const ctrl::GetEgressRequest& req, const CallContext&) -> kib::Result<ctrl::GetEgressResponse> {
          ctrl::GetEgressResponse r;
          r.mutable_egress()->set_egress_id(req.egress_id());
          return r;
        });
    handler = std::make_unique<kib::api::ConnectHandler>(registry, max_body);
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    client = UniqueFd(fds[0]);
    server = UniqueFd(fds[1]);
    timeval tv{5, 0};
    ::setsockopt(client.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(server.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread = std::thread([this] {
      kib::api::SocketStream s(server.get());
      kib::api::serve_connection(s, *handler, "test");
      ::shutdown(server.get(), SHUT_RDWR);
    });
  }
  ~Connection() {
    ::shutdown(client.get(), SHUT_RDWR);
    thread.join();
  }
  void send(const std::string& data) {
    REQUIRE(::send(client.get(), data.data(), data.size(), MSG_NOSIGNAL) == (ssize_t)data.size());
  }
  // Reads until `count` occurrences of `marker` arrived or the server closed.
  std::string read_until(const std::string& marker, int count = 1) {
    std::string out;
    char buf[4096];
    auto occurrences = [&] {
      int n = 0;
      for (size_t p = out.find(marker); p != std::string::npos; p = out.find(marker, p + 1)) ++n;
      return n;
    };
    while (occurrences() < count) {
      ssize_t n = ::recv(client.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, n);
    }
    return out;
  }
  std::string read_all() { return read_until("\x01never\x02"); }
};

std::string post(const std::string& body, const std::string& extra = "") {
  return "POST /kibotos.ctrl.v1.EgressService/GetEgress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

TEST_CASE("HTTP/1.1 keeps the connection alive across requests") {
  Connection c;
  for (int i = 0; i < 3; ++i) {
    c.send(post(R"({"egressId":"e)" + std::to_string(i) + "\"}"));
    std::string r = c.read_until("\"}}");
    CHECK(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(r.find("\"e" + std::to_string(i) + "\"") != std::string::npos);
    CHECK(r.find("connection: close") == std::string::npos);
  }
}

TEST_CASE("pipelined HTTP/1.1 requests are answered in order") {
  Connection c;
  c.send(post(R"({"egressId":"first"})") + post(R"({"egressId":"second"})"));
  std::string r = c.read_until("\"}}", 2);
  auto first = r.find("first"), second = r.find("second");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(first < second);
}

TEST_CASE("Expect: 100-continue gets 100 Continue before the body") {
  Connection c;
  std::string body = R"({"egressId":"x"})";
  c.send(
      "POST /kibotos.ctrl.v1.EgressService/GetEgress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Expect: 100-continue\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n");
  CHECK(c.read_until("\r\n\r\n") == "HTTP/1.1 100 Continue\r\n\r\n");
  c.send(body);
  CHECK(c.read_until("\"}}").find("HTTP/1.1 200 OK") == 0);
}

TEST_CASE("a Content-Length over the limit is answered resource_exhausted without reading the body") {
  Connection c(1024);
  c.send(
      "POST /kibotos.ctrl.v1.EgressService/GetEgress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n");
  std::string r = c.read_all();
  CHECK(r.rfind("HTTP/1.1 429 ", 0) == 0);
  CHECK(r.find("resource_exhausted") != std::string::npos);
  CHECK(r.find("connection: close") != std::string::npos);
}

TEST_CASE("a chunked body over the limit is resource_exhausted and the connection stays usable") {
  Connection c(1024);
  std::string chunk(800, ' ');
  char size[16];
  std::snprintf(size, sizeof size, "%zx", chunk.size());
  c.send(
      "POST /kibotos.ctrl.v1.EgressService/GetEgress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      std::string(size) + "\r\n" + chunk + "\r\n" + size + "\r\n" + chunk + "\r\n0\r\n\r\n");
  CHECK(c.read_until("\"}").find("resource_exhausted") != std::string::npos);
  c.send(post(R"({"egressId":"after"})"));
  CHECK(c.read_until("\"}}").find("after") != std::string::npos);
}

TEST_CASE("a malformed request is answered 400 with a Connect error body and closed") {
  Connection c;
  c.send("BLAH\r\n\r\n");
  std::string r = c.read_all();
  CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(r.find("content-type: application/json\r\n") != std::string::npos);
  CHECK(r.find("{\"code\":\"invalid_argument\"") != std::string::npos);
}

TEST_CASE("a request target over 8 KiB is 414 URI Too Long") {
  Connection c;
  c.send("POST /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.read_all();
  CHECK(r.rfind("HTTP/1.1 414 URI Too Long\r\n", 0) == 0);
  CHECK(r.find("{\"code\":\"resource_exhausted\"") != std::string::npos);
}

TEST_CASE("an HTTP major version other than 1 is 505, and a request line without one is 400") {
  Connection c;
  c.send(
      "POST /kibotos.ctrl.v1.EgressService/GetEgress HTTP/9.9\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}");
  std::string r = c.read_all();
  CHECK(r.rfind("HTTP/1.1 505 HTTP Version Not Supported\r\n", 0) == 0);
  CHECK(r.find("HTTP/9.9 is not supported") != std::string::npos);

  Connection d;
  d.send("POST /kibotos.ctrl.v1.EgressService/GetEgress\r\nContent-Type: application/json\r\n\r\n");
  r = d.read_all();
  CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(r.find("the request line has no HTTP version") != std::string::npos);
}

TEST_CASE("HTTP/1.0 is still served") {
  Connection c;
  std::string request = post(R"({"egressId":"old"})");
  request.replace(request.find("HTTP/1.1"), 8, "HTTP/1.0");
  c.send(request);
  CHECK(c.read_all().find("\"old\"") != std::string::npos);
}

TEST_CASE("obs-fold in a header is 400 (RFC 9112 section 5.2)") {
  for (const char* fold :
       {"X-Folded: first\r\n second\r\n", "X-Folded:\r\n\tsecond\r\n", "X-Folded: a\r\n  \t b\r\n"}) {
    Connection c;
    c.send(post(R"({"egressId":"x"})", fold));
    std::string r = c.read_all();
    CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
    CHECK(r.find("obs-fold") != std::string::npos);
  }
}

TEST_CASE("header values with inner whitespace and empty values are not obs-fold") {
  Connection c;
  c.send(post(R"({"egressId":"ws"})", "X-Spaced: a  b\t c \r\nX-Empty:\r\nX-Blank:   \r\n"));
  CHECK(c.read_until("\"}}").find("\"ws\"") != std::string::npos);
}

TEST_CASE("Connection: close is honoured") {
  Connection c;
  c.send(post(R"({"egressId":"x"})", "Connection: close\r\n"));
  std::string r = c.read_all();  // returns because the server closes
  CHECK(r.find("connection: close") != std::string::npos);
  CHECK(r.find("\"x\"") != std::string::npos);
}

TEST_CASE("a refusal the headers decide goes out before the body, with connection: close") {
  const std::string path = "/kibotos.ctrl.v1.EgressService/GetEgress";
  struct Case {
    std::string request_head;
    const char* status_line;
  };
  const Case cases[] = {
      {"POST /kibotos.ctrl.v1.EgressService/NoSuchMethod HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       "Content-Length: 100\r\n\r\n",
       "HTTP/1.1 404 "},
      {"POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n",
       "HTTP/1.1 415 "},
      {"PUT " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
       "HTTP/1.1 405 "},
      // Chunked: no length says how much is to come; the refusal does not wait for it either.
      {"POST /no.Such/Method HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       "Transfer-Encoding: chunked\r\n\r\n",
       "HTTP/1.1 404 "},
      // Nor for the client that asked whether to send its body.
      {"POST " + path +
           " HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nExpect: 100-continue\r\n"
           "Content-Length: 100\r\n\r\n",
       "HTTP/1.1 415 "},
  };
  for (const Case& one : cases) {
    // Not a structured binding: clang 14 cannot capture one (CAPTURE is a lambda).
    const std::string& request_head = one.request_head;
    const char* status_line = one.status_line;
    CAPTURE(request_head);
    Connection c;
    c.send(request_head);  // the body is never sent: the answer must not wait for it
    std::string r = c.read_until("\r\n\r\n");
    CHECK(r.rfind(status_line, 0) == 0);
    CHECK(r.find("connection: close\r\n") != std::string::npos);
  }
}

TEST_CASE("the body of a request refused early is never read as a request") {
  Connection c;
  const std::string smuggled = post(R"({"egressId":"smuggled"})");
  c.send("POST /no.Such/Method HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled);
  ::shutdown(c.client.get(), SHUT_WR);  // the agent's drain of the unread body ends here
  std::string r = c.read_all();
  CHECK(r.rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(r.find("smuggled") == std::string::npos);
}

TEST_CASE("a request without a body to come is answered in turn and keeps the connection") {
  Connection c;
  c.send("POST /no.Such/Method HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n");
  std::string r = c.read_until("}");
  CHECK(r.rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(r.find("connection: close") == std::string::npos);
  c.send(post(R"({"egressId":"next"})"));
  CHECK(c.read_until("\"}}").find("\"next\"") != std::string::npos);
}

TEST_CASE("a refused request whose body came with its headers is answered in turn, keeping the connection") {
  Connection c;
  c.send("POST /no.Such/Method HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  std::string r = c.read_until("}");
  CHECK(r.rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(r.find("connection: close") == std::string::npos);
  c.send(post(R"({"egressId":"next"})"));
  CHECK(c.read_until("\"}}").find("\"next\"") != std::string::npos);
}

TEST_CASE("after an early refusal a client that neither sends its body nor closes is closed within seconds") {
  // The agent's own stream: api.idle_timeout 60 s, api.request_timeout 30 s.
  kib::api::MethodRegistry registry;
  kib::api::ConnectHandler handler(registry, 1 << 20);
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  UniqueFd client(fds[0]), server(fds[1]);
  std::atomic<int64_t> idle{-1};
  std::thread t([&] {
    kib::api::SocketStream socket(server.get());
    kib::api::DeadlineStream s(socket, server.get(), std::chrono::seconds(60), std::chrono::seconds(30), idle);
    kib::api::serve_connection(s, handler, "test");
    ::shutdown(server.get(), SHUT_RDWR);
  });
  const std::string head =
      "POST /no.Such/Method HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
  REQUIRE(::send(client.get(), head.data(), head.size(), MSG_NOSIGNAL) == (ssize_t)head.size());
  const auto start = std::chrono::steady_clock::now();
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(client.get(), buf, sizeof buf, 0)) > 0;) got.append(buf, n);  // until the close
  CHECK(got.rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  t.join();
}
