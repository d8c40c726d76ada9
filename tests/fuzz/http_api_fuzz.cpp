// Fuzz target: the whole API server behind a socket, bytes in and responses out
// (agent/api/http/connection.cpp onward): HTTP/1.1 (http-parser) or HTTP/2 (nghttp2
// and the agent's own stream checks), then Connect, gRPC and gRPC-Web framing, JSON
// and binary codecs, gzip, the method registry, and the three services on a real
// SQLite store (in /dev/shm, reset every few thousand inputs), with health and
// reflection beside them. Nothing is mocked but the data plane (no namespaces are
// touched) and name lookups (every host resolves to a TEST-NET address: no DNS).
//
// The first byte picks how the stream is cut into reads; the second whether the
// HTTP/2 client preface and an empty SETTINGS frame go first. Checked beyond not
// crashing (ASan, UBSan): whatever an HTTP/1.1 client sends is answered with HTTP/1.1
// status lines only, and an HTTP/2 client gets the server's SETTINGS first.
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "agent/api/connect/connect_handler.h"
#include "agent/api/connect/method_registry.h"
#include "agent/api/grpc/rpc_router.h"
#include "agent/api/http/connection.h"
#include "agent/api/http/get_route.h"
#include "agent/api/reflection/health_check.h"
#include "agent/api/reflection/server_reflection.h"
#include "agent/api/services/control_plane_options.h"
#include "agent/runtime/runtime.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace api = kib::api;

// The data plane's side of the services, answering as an idle one would.
class IdleRuntime final : public kib::Runtime {
 public:
  void egress_published(kib::EgressRevisionPtr, uint32_t) override {}
  void egress_deleted(const std::string&) override {}
  kib::Status workspace_applied(const std::string&, const std::string&, const kib::ctrl::NetworkPolicy&,
                                uint32_t) override {
    return {};
  }
  void workspace_deleted(const std::string&) override {}
  kib::ctrl::NetworkPolicyStatus workspace_status(const std::string&) const override { return {}; }
  kib::RuntimeCounts counts() const override { return {}; }
};

// The request bytes, handed out in reads of the sizes the first byte picked; the
// responses are kept to be checked.
class MemoryStream final : public api::ByteStream {
 public:
  MemoryStream(std::string_view in, uint8_t cut) : in_(in), cut_(cut) {}
  ssize_t read(void* buf, size_t len) override {
    static constexpr size_t kSizes[] = {1, 3, 9, 64, 500, 4096, 1 << 20};
    size_t n = std::min(len, in_.size());                             // cut < 128: reads as large as asked
    if (cut_ >= 128) n = std::min(n, kSizes[(cut_ + reads_++) % 7]);  // otherwise cycling sizes
    std::memcpy(buf, in_.data(), n);
    in_.remove_prefix(n);
    return static_cast<ssize_t>(n);
  }
  bool write_all(const void* data, size_t len) override {
    if (out_.size() < 4096) out_.append(static_cast<const char*>(data), std::min<size_t>(len, 4096));
    return true;
  }
  const std::string& out() const { return out_; }

 private:
  std::string_view in_;
  uint8_t cut_;
  size_t reads_ = 0;
  std::string out_;
};

// The server as the daemon assembles it (agent/daemon/daemon.cpp), on a fresh store.
class Server {
 public:
  Server() : dir_(make_dir()) {
    config_.state_dir = dir_ + "/state";
    config_.egress.allowed_special_purpose_cidrs = {"203.0.113.0/24"};
    api::ControlPlaneOptions o;
    o.apply_retry_interval = std::chrono::milliseconds(0);
    o.clock = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000)); };
    o.resolve = [](const std::string&) -> kib::Result<std::vector<kib::policy::IpAddress>> {
      return std::vector<kib::policy::IpAddress>{*kib::policy::IpAddress::parse("203.0.113.9")};
    };
    auto cp = api::open_control_plane(config_, runtime_, o);
    require(cp.ok(), "the control plane opens");
    plane_ = std::move(cp).value();
    plane_->register_methods(registry_);
    ready_.set(true);
    health_.register_methods(registry_);
    reflection_ = std::make_unique<api::ServerReflection>(registry_.services());
    reflection_->register_methods(registry_);
  }
  ~Server() {
    plane_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const api::HttpHandler& handler() const { return route_; }

 private:
  static std::string make_dir() {
    char tmpl[] = "/dev/shm/kibotos-fuzz-XXXXXX";
    require(::mkdtemp(tmpl) != nullptr, "a state dir in /dev/shm");
    return tmpl;
  }
  std::string dir_;
  kib::Config config_;
  IdleRuntime runtime_;
  std::unique_ptr<api::ControlPlane> plane_;
  api::MethodRegistry registry_;
  api::Readiness ready_;
  api::HealthCheck health_{ready_, {}};
  std::unique_ptr<api::ServerReflection> reflection_;
  api::ConnectHandler connect_{registry_, 1 << 20};
  api::RpcRouter rpc_{registry_, connect_};
  api::GetRoute route_{"/metrics", "text/plain", [this] { return plane_->metrics_text(); }, rpc_};
};

std::unique_ptr<Server>& server() {
  static std::unique_ptr<Server> s;  // destroyed at exit, and its store's folder with it
  return s;
}

void quiet() {
  spdlog::set_level(spdlog::level::off);
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

constexpr std::string_view kPreface{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int runs = 0;
  if (runs == 0) quiet();
  if (runs++ % 4096 == 0) {  // a fresh store now and then: what inputs create stays bounded
    server().reset();
    server() = std::make_unique<Server>();
  }
  kib::fuzz::FuzzInput in(data, size);
  const uint8_t cut = in.byte();
  const bool h2 = in.byte() & 1;
  std::string bytes = h2 ? std::string(kPreface) : std::string();
  bytes += kib::fuzz::text(in.rest());
  MemoryStream stream(bytes, cut);
  api::serve_connection(stream, server()->handler(), "unix:uid=0");
  const std::string& out = stream.out();
  if (out.empty()) return 0;
  if (bytes.starts_with(kPreface.substr(0, 24))) {
    require(out.size() >= 9 && out[3] == 4, "an HTTP/2 client gets SETTINGS first");
  } else {
    require(out.starts_with("HTTP/1.1 "), "an HTTP/1.1 client gets HTTP/1.1 answers");
  }
  return 0;
}
