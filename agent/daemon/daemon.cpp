#include "agent/daemon/daemon.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>

#include <atomic>
#include <cstdio>

#include "agent/api/connect/connect_handler.h"
#include "agent/api/grpc/rpc_router.h"
#include "agent/api/http/get_route.h"
#include "agent/api/http/http_server.h"
#include "agent/api/reflection/health_check.h"
#include "agent/api/reflection/server_reflection.h"
#include "agent/daemon/effective_config.h"
#include "agent/daemon/logging.h"
#include "agent/daemon/options.h"
#include "agent/daemon/signals.h"
#include "agent/daemon/wiring.h"

namespace kib::daemon {
namespace {

// Thousands of relayed connections need thousands of fds; the soft limit is often 1024.
void raise_nofile_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) spdlog::warn("cannot raise RLIMIT_NOFILE to {}", lim.rlim_max);
}

int check_config(const std::string& file) {
  auto config = load_effective_config(file);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.error().message.c_str());
    return 1;
  }
  std::printf("config OK\n");
  return 0;
}

void reload(api::HttpServer& server) {
  sd_notify(0, "RELOADING=1");
  if (auto st = server.reload_tls(); st.ok()) spdlog::info("reloaded the TLS certificate, key and client CA");
  else spdlog::error("TLS reload failed, keeping the previous certificates: {}", st.error().message);
  sd_notify(0, "READY=1");
}

int serve(const Config& config) {
  auto signals = SignalWaiter::open();
  if (!signals.ok()) {
    spdlog::error("{}", signals.error().message);
    return 1;
  }
  api::MethodRegistry registry;
  auto wiring = wire(config, registry);
  if (!wiring.ok()) {
    spdlog::error("cannot start: {}", wiring.error().message);
    return 1;
  }
  // Health answers SERVING between READY=1 and STOPPING=1, as systemd is told.
  std::atomic<bool> ready{false};
  api::HealthCheck health(ready, registry.services());
  health.register_methods(registry);
  api::ServerReflection reflection(registry.services());
  reflection.register_methods(registry);
  api::ConnectHandler connect(registry, config.api.max_body_bytes);
  api::RpcRouter rpc(registry, connect);
  api::ControlPlane* plane = wiring->control_plane.get();
  api::GetRoute handler("/metrics", "text/plain; version=0.0.4; charset=utf-8", [plane]() -> Result<std::string> {
    if (plane == nullptr) return Error{Code::unimplemented, "this build has no control plane"};
    return plane->metrics_text();
  }, rpc);
  api::HttpServer server(config.api, handler);
  if (auto st = server.start(); !st.ok()) {
    spdlog::error("cannot start: {}", st.error().message);
    return 1;
  }
  spdlog::info("kibotos-agent {} serving on {}{}{}", KIBOTOS_VERSION, config.api.unix_socket,
               config.api.tls.listen.empty() ? "" : " and TLS ", config.api.tls.listen);
  sd_notify(0, "READY=1");
  ready.store(true);
  while (signals->wait() == DaemonSignal::reload) reload(server);
  ready.store(false);
  sd_notify(0, "STOPPING=1");
  spdlog::info("stopping");
  server.stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int run(const std::vector<std::string>& args) {
  auto options = parse_options(args);
  if (!options.ok()) {
    std::fprintf(stderr, "kibotos-agent: %s\n%s", options.error().message.c_str(), usage());
    return 2;
  }
  if (options->help) {
    std::printf("%s", usage());
    return 0;
  }
  if (options->version) {
    std::printf("kibotos-agent %s\n", KIBOTOS_VERSION);
    return 0;
  }
  if (options->check_config) return check_config(options->config_file);

  // Before any thread starts, so only the main thread receives these signals.
  block_daemon_signals();
  auto config = load_effective_config(options->config_file);
  if (!config.ok()) {
    std::fprintf(stderr, "kibotos-agent: %s\n", config.error().message.c_str());
    return 1;
  }
  setup_logging(config->log_level, config->log_format);
  raise_nofile_limit();
  return serve(*config);
}

}  // namespace kib::daemon
