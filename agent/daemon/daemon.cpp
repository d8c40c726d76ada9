#include "agent/daemon/daemon.h"

#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "agent/api/connect/connect_handler.h"
#include "agent/api/grpc/rpc_router.h"
#include "agent/api/http/get_route.h"
#include "agent/api/http/http_server.h"
#include "agent/api/reflection/health_check.h"
#include "agent/api/reflection/server_reflection.h"
#include "agent/daemon/effective_config.h"
#include "agent/daemon/fd_store.h"
#include "agent/daemon/handover.h"
#include "agent/daemon/host_check.h"
#include "agent/daemon/logging.h"
#include "agent/daemon/options.h"
#include "agent/daemon/relay_handover.h"
#include "agent/daemon/signals.h"
#include "agent/daemon/wiring.h"
#include "netns/inherited_listeners.h"

namespace kib::daemon {
namespace {

// Thousands of relayed connections need thousands of fds; the soft limit is often 1024.
void raise_nofile_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) spdlog::warn("cannot raise RLIMIT_NOFILE to {}", lim.rlim_max);
}

// --check-config, and --print-config (print: every key and the value in force).
int check_config(const std::string& file, bool print) {
  auto config = load_effective_config(file);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.error().message.c_str());
    return 1;
  }
  if (auto st = check_host_prerequisites(*config); !st.ok()) {
    std::fprintf(stderr, "%s%s\n", file.empty() ? "" : (file + ": ").c_str(), st.error().message.c_str());
    return 1;
  }
  if (print) {
    for (const auto& [key, value] : config_values(*config)) std::printf("%s: %s\n", key.c_str(), value.c_str());
    return 0;
  }
  std::printf("config OK\n");
  return 0;
}

// The API sockets the running agent handed over, and the connection to tell it once
// this agent serves.
struct TakenOver {
  UniqueFd peer;
  api::ApiListeners api;
};

// What identifies the API sockets: an agent configured for other ones cannot take
// the running agent's (a changed api.unix_socket or api.tls.listen needs a cold
// restart).
std::string api_sockets_of(const Config& config) {
  return config.api.unix_socket + " " + (config.api.tls.listen.empty() ? "-" : config.api.tls.listen);
}

Result<std::optional<TakenOver>> take_over(const Config& config) {
  KIB_TRY_ASSIGN(auto peer, connect_handover(config.state_dir));
  if (!peer) {
    spdlog::info("--take-over: no agent serves {}; starting as usual", handover_socket_path(config.state_dir));
    return std::optional<TakenOver>{};
  }
  KIB_TRY(send_handover(peer->get(), "take-over", api_sockets_of(config)));
  // The running agent first lets the API calls it is serving finish, and sends its
  // Workspace listeners ahead.
  size_t listeners = 0;
  KIB_TRY_ASSIGN(auto reply, receive_listeners(peer->get(), std::chrono::seconds(90), listeners));
  if (listeners > 0) spdlog::info("--take-over: {} Workspace listeners handed over", listeners);
  if (reply.op == "refused") return Error{Code::failed_precondition, "the running agent refused: " + reply.detail};
  if (reply.op != "released" || reply.fds.size() < 2)
    return Error{Code::internal, "the running agent answered \"" + reply.op + "\" with " +
                                     std::to_string(reply.fds.size()) + " sockets"};
  TakenOver t{std::move(*peer), {}};
  t.api.unix_socket = std::move(reply.fds[0]);
  t.api.unix_lock = std::move(reply.fds[1]);
  if (reply.fds.size() > 2) t.api.tls = std::move(reply.fds[2]);
  return std::optional<TakenOver>(std::move(t));
}

enum class HandOver { kept_serving, handed_over, failed };

// The running agent's side of a take-over (handover.h). Nothing changes here until
// the request is known to be one this agent can serve.
HandOver hand_over(UniqueFd peer, const Config& config, api::HttpServer& server, Wiring& wiring,
                   HandoverListener& listener, api::Readiness& ready) {
  auto request = receive_handover(peer.get(), std::chrono::seconds(5));
  std::string refusal;
  if (!request.ok())
    refusal = request.error().message;
  else if (request->op != "take-over")
    refusal = "unknown request \"" + request->op + "\"";
  else if (request->detail != api_sockets_of(config))
    refusal =
        "the API sockets differ (\"" + request->detail + "\" here \"" + api_sockets_of(config) + "\"): restart cold";
  if (!refusal.empty()) {
    spdlog::warn("refusing a take-over: {}", refusal);
    (void)send_handover(peer.get(), "refused", refusal);
    return HandOver::kept_serving;
  }
  spdlog::info("handing the API and the store over to a new agent");
  ready.set(false);
  auto api = server.hand_over();
  if (!api.ok()) {
    spdlog::error("take-over failed: {}; exiting", api.error().message);
    return HandOver::failed;
  }
  wiring.control_plane.reset();  // closes the store and its lock: the new agent opens them
  listener.close();              // the new agent serves the next take-over
  if (auto st = send_listeners(peer.get(), wiring.runtime->listening_sockets()); !st.ok()) {
    spdlog::error("take-over failed: {}; exiting", st.error().message);
    return HandOver::failed;
  }
  std::vector<int> fds{api->unix_socket.get(), api->unix_lock.get()};
  if (api->tls) fds.push_back(api->tls.get());
  if (auto st = send_handover(peer.get(), "released", {}, fds); !st.ok()) {
    spdlog::error("take-over failed: {}; exiting", st.error().message);
    return HandOver::failed;
  }
  // Its start adopts every Workspace: seconds for thousands.
  auto done = receive_handover(peer.get(), std::chrono::seconds(300));
  if (!done.ok() || done->op != "ready") {
    spdlog::error("the new agent did not start ({}); exiting", done.ok() ? done->op : done.error().message);
    return HandOver::failed;
  }
  wiring.runtime->stop_accepting();
  send_relays(std::move(peer), *wiring.runtime, std::chrono::seconds(30), "take-over");
  return HandOver::handed_over;
}

// After a take-over: relays what this agent still has until it ends, a stop signal,
// or restart.drain_timeout.
void drain(Runtime& runtime, SignalWaiter& signals, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const RuntimeCounts c = runtime.counts();
    const uint64_t left = c.active_connections + c.draining_connections;
    if (left == 0) return spdlog::info("handed over; every connection ended");
    if (std::chrono::steady_clock::now() >= deadline)
      return spdlog::warn("handed over; restart.drain_timeout passed with {} connections left: resetting them", left);
    pollfd p{signals.fd(), POLLIN, 0};
    if (::poll(&p, 1, 200) > 0 && signals.wait() == DaemonSignal::stop)
      return spdlog::info("handed over; stopping with {} connections left", left);
  }
}

// SIGUSR2 (systemctl reload, package upgrades): starts the binary this agent was
// started from (after an upgrade, the new version) with --take-over. It tells systemd
// it is the service's main process once it serves (NotifyAccess=all).
void start_successor(const std::string& exe, const std::string& config_file) {
  std::vector<std::string> args{exe};
  if (!config_file.empty()) args.insert(args.end(), {"--config", config_file});
  args.emplace_back("--take-over");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return spdlog::error("cannot start a new agent from {}: {}", exe, std::strerror(rc));
  spdlog::info("started a new agent (pid {}) to take over", pid);
  // Reaps it if it ends while this agent runs (a failed take-over says why in its log).
  std::thread([pid] {
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      spdlog::warn("the new agent (pid {}) ended with status {}", pid, status);
  }).detach();
}

// What woke the main thread.
enum class Event { stop, reload, upgrade, take_over };

Event wait_event(SignalWaiter& signals, const HandoverListener* listener) {
  for (;;) {
    pollfd p[2] = {{signals.fd(), POLLIN, 0}, {listener ? listener->fd() : -1, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Event::stop;
    }
    if (p[0].revents) {
      switch (signals.wait()) {
        case DaemonSignal::reload: return Event::reload;
        case DaemonSignal::upgrade: return Event::upgrade;
        case DaemonSignal::stop: return Event::stop;
      }
    }
    if (p[1].revents) return Event::take_over;
  }
}

void reload(api::HttpServer& server) {
  sd_notify(0, "RELOADING=1");
  if (auto st = server.reload_tls(); st.ok())
    spdlog::info("reloaded the TLS certificate, key and client CA");
  else
    spdlog::error("TLS reload failed, keeping the previous certificates: {}", st.error().message);
  sd_notify(0, "READY=1");
}

int serve(const Config& config, const Options& options, const std::string& exe) {
  auto signals = SignalWaiter::open();
  if (!signals.ok()) {
    spdlog::error("{}", signals.error().message);
    return 1;
  }
  std::optional<TakenOver> taken;
  if (options.take_over) {
    auto t = take_over(config);
    if (!t.ok()) {
      spdlog::error("cannot take over: {}", t.error().message);
      return 1;
    }
    taken = std::move(t).value();
  }
  // systemctl restart: what the previous agent left in systemd's fd store.
  std::optional<UniqueFd> stored = options.take_over ? std::nullopt : restore_from_fd_store();
  api::MethodRegistry registry;
  auto wiring = wire(config, registry);
  if (!wiring.ok()) {
    spdlog::error("cannot start: {}", wiring.error().message);
    return 1;
  }
  // Every Workspace was adopted: what it did not take goes (its Workspace is gone, or
  // it attached afresh on other ports).
  if (const size_t left = netns::clear_inherited_listeners(); left > 0)
    spdlog::info("--take-over: {} handed-over listeners were not needed", left);
  // Health answers SERVING between READY=1 and STOPPING=1, as systemd is told.
  api::Readiness ready;
  api::HealthCheck health(ready, registry.services());
  health.register_methods(registry);
  api::ServerReflection reflection(registry.services());
  reflection.register_methods(registry);
  api::ConnectHandler connect(registry, config.api.max_body_bytes);
  api::RpcRouter rpc(registry, connect);
  api::ControlPlane* plane = wiring->control_plane.get();
  api::GetRoute handler(
      "/metrics", "text/plain; version=0.0.4; charset=utf-8",
      [plane]() -> Result<std::string> {
        if (plane == nullptr) return Error{Code::unimplemented, "this build has no control plane"};
        return plane->metrics_text();
      },
      rpc);
  api::HttpServer server(config.api, handler);
  if (auto st = taken ? server.start(std::move(taken->api)) : server.start(); !st.ok()) {
    spdlog::error("cannot start: {}", st.error().message);
    return 1;
  }
  spdlog::info("kibotos-agent {} (pid {}) serving on {}{}{}{}", KIBOTOS_VERSION, ::getpid(), config.api.unix_socket,
               config.api.tls.listen.empty() ? "" : " and TLS ", config.api.tls.listen, taken ? " (taken over)" : "");
  if (taken) {
    // Before the old agent may exit: systemd must not take its end for the service's.
    sd_notifyf(0, "MAINPID=%lu", static_cast<unsigned long>(::getpid()));
    // The old agent now closes its Workspace listeners; ours took their place.
    if (auto st = send_handover(taken->peer.get(), "ready"); st.ok())
      receive_relays(taken->peer.get(), *wiring->runtime, "take-over");
    else
      spdlog::warn("could not tell the old agent: {}", st.error().message);
    taken.reset();
  }
  if (stored) {
    receive_relays(stored->get(), *wiring->runtime, "restart");
    stored.reset();
  }
  // Without it this agent still serves; only a later take-over is refused.
  auto handover = HandoverListener::open(config.state_dir);
  if (!handover.ok()) spdlog::error("take-over unavailable: {}", handover.error().message);
  HandoverListener* listener = handover.ok() ? &handover.value() : nullptr;
  sd_notify(0, "READY=1");
  ready.set(true);
  for (;;) {
    const Event e = wait_event(*signals, listener);
    if (e == Event::stop) break;
    if (e == Event::reload) {
      reload(server);
      continue;
    }
    if (e == Event::upgrade) {
      start_successor(exe, options.config_file);
      continue;
    }
    UniqueFd peer = listener->accept();
    if (!peer) continue;
    switch (hand_over(std::move(peer), config, server, wiring.value(), *listener, ready)) {
      case HandOver::kept_serving: continue;
      case HandOver::failed: return 1;
      case HandOver::handed_over: drain(*wiring->runtime, *signals, config.restart.drain_timeout); return 0;
    }
  }
  // Before the server stops: its health Watch streams send NOT_SERVING, then end.
  ready.set(false);
  sd_notify(0, "STOPPING=1");
  spdlog::info("stopping");
  server.stop();
  // Under systemd with a store: `systemctl restart` keeps the guests' connections
  // (fd_store.h); on `systemctl stop` systemd closes them.
  if (fd_store_available()) {
    if (auto st = store_for_restart(*wiring->runtime, std::chrono::seconds(10)); !st.ok())
      spdlog::error("restart: {}; the connections close", st.error().message);
  }
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
  if (options->check_config || options->print_config) return check_config(options->config_file, options->print_config);

  // Before any thread starts, so only the main thread receives these signals.
  block_daemon_signals();
  auto config = load_effective_config(options->config_file);
  if (!config.ok()) {
    std::fprintf(stderr, "kibotos-agent: %s\n", config.error().message.c_str());
    return 1;
  }
  setup_logging(config->log_level, config->log_format);
  raise_nofile_limit();
  // The binary's path now, before an upgrade may replace the file (SIGUSR2 starts
  // what is there then).
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return serve(*config, *options, exe);
}

}  // namespace kib::daemon
