#pragma once
// Non-blocking c-ares lookups driven by an external event loop (the data plane's
// io_uring loop), for "resolve the Egress host with c-ares on every dial". Loop-
// agnostic: the owner watches sockets() for readiness (poll-add), calls
// process_fd() when one is ready and process_timeouts() when next_timeout() expires.
// One instance per loop thread; not thread-safe.
#include <ares.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/policy/ip_address.h"
#include "agent/policy/name_resolver.h"

namespace kib::policy {

class AsyncResolver {
 public:
  // An empty vector: the host does not resolve (NXDOMAIN, no data, server failure,
  // or options.timeout passed). An Error: the lookup could not run (bad name,
  // out of memory, resolver destroyed).
  using Callback = std::function<void(Result<std::vector<IpAddress>>)>;

  struct SocketInterest {
    int fd = -1;
    bool read = false;
    bool write = false;
  };
  // Told whenever c-ares opens, changes or closes a socket (read = write = false:
  // stop watching fd; it is about to be closed). It may also run from the
  // destructor.
  using SocketStateHook = std::function<void(const SocketInterest&)>;

  // options.servers as in resolve_host; options.timeout bounds each lookup.
  static Result<std::unique_ptr<AsyncResolver>> create(const ResolverOptions& options, SocketStateHook hook = {});
  ~AsyncResolver();  // pending callbacks run with an Error (unavailable)
  AsyncResolver(const AsyncResolver&) = delete;
  AsyncResolver& operator=(const AsyncResolver&) = delete;

  // Starts a lookup of A and AAAA records. The callback runs exactly once, from
  // inside resolve() (IP literals, /etc/hosts, immediate failures), process_fd() or
  // process_timeouts(); it must not destroy the resolver. At most 4096 lookups are in
  // flight per resolver (resource_exhausted beyond).
  void resolve(const std::string& host, Callback callback);

  // The sockets c-ares wants watched now.
  std::vector<SocketInterest> sockets() const;
  // fd became readable and/or writable (pass -1 for the other direction).
  void process_fd(int read_fd, int write_fd);
  // Time until process_timeouts() must run; nullopt when nothing is pending.
  std::optional<std::chrono::milliseconds> next_timeout() const;
  void process_timeouts();
  size_t pending() const { return pending_; }

 private:
  struct Lookup;
  AsyncResolver(std::chrono::milliseconds timeout, SocketStateHook hook);
  static void on_result(void* arg, int status, int timeouts, struct ares_addrinfo* result);
  static void on_socket_state(void* data, int fd, int readable, int writable);
  void expire_lookups();

  ares_channel channel_ = nullptr;  // owned: ares_destroy in the destructor
  std::chrono::milliseconds timeout_;
  SocketStateHook hook_;
  std::map<int, SocketInterest> sockets_;
  // Every lookup c-ares still holds; a timed-out lookup stays here, callback
  // already spent, until c-ares lets go of it.
  std::map<uint64_t, std::unique_ptr<Lookup>> lookups_;
  uint64_t next_id_ = 1;
  size_t pending_ = 0;  // lookups whose callback has not run yet
};

}  // namespace kib::policy
