#pragma once
// A stand-in agent for kibotosctl's unit tests: a Unix socket that answers each
// request with the next canned HTTP response and records what it was sent. Each
// response closes its connection, so one accept serves one request.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

struct CannedResponse {
  int status;
  std::string body;
};

struct RecordedRequest {
  std::string path;
  std::string body;
};

class FakeAgent {
 public:
  explicit FakeAgent(std::vector<CannedResponse> responses) : responses_(std::move(responses)) {
    char dir[] = "/tmp/kibotosctl-test-XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/ctrl.sock";
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path_.copy(a.sun_path, sizeof a.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0) std::abort();
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeAgent() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& socket_path() const { return path_; }
  // Valid after the destructor's join, or once every response was served.
  const std::vector<RecordedRequest>& requests() {
    if (thread_.joinable()) thread_.join();
    return requests_;
  }

 private:
  void serve() {
    for (const auto& r : responses_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) return;  // bounded: a test never hangs here
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      requests_.push_back(read_request(c));
      const std::string reply = "HTTP/1.1 " + std::to_string(r.status) +
                                " X\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                                std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
      (void)!::write(c, reply.data(), reply.size());
      ::close(c);
    }
  }

  static RecordedRequest read_request(int c) {
    std::string in;
    char buf[4096];
    size_t header_end = std::string::npos, need = 0;
    for (;;) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) break;
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      if (header_end == std::string::npos && (header_end = in.find("\r\n\r\n")) != std::string::npos) {
        const auto cl = in.find("Content-Length: ");
        need = cl < header_end ? std::strtoul(in.c_str() + cl + 16, nullptr, 10) : 0;
      }
      if (header_end != std::string::npos && in.size() >= header_end + 4 + need) break;
    }
    RecordedRequest r;
    const auto sp1 = in.find(' '), sp2 = in.find(' ', sp1 + 1);
    if (sp1 != std::string::npos && sp2 != std::string::npos) r.path = in.substr(sp1 + 1, sp2 - sp1 - 1);
    if (header_end != std::string::npos) r.body = in.substr(header_end + 4);
    return r;
  }

  std::vector<CannedResponse> responses_;
  std::vector<RecordedRequest> requests_;
  std::string dir_, path_;
  int fd_ = -1;
  std::thread thread_;
};
