#include "agent/policy/async_resolver.h"

#include <algorithm>
#include <mutex>

#include "agent/common/c_ptr.h"
#include "agent/policy/endpoint.h"

namespace kib::policy {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxServers = 8;
constexpr size_t kMaxHostName = 253;
// Dials are capped by the data plane; this bounds the resolver on its own too.
constexpr size_t kMaxLookups = 4096;
constexpr size_t kMaxAddresses = 64;  // a hostile zone cannot grow our vectors without bound

Status library_init() {
  static std::once_flag once;
  static int status = ARES_SUCCESS;
  std::call_once(once, [] { status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (status != ARES_SUCCESS)
    return make_error(Code::internal, std::string("c-ares library init: ") + ares_strerror(status));
  return {};
}

// "ip" or "ip:port" ("[v6]:port") -> the "[v6]:port" form ares_set_servers_ports_csv takes.
Result<std::string> server_entry(const std::string& text) {
  HostPort hp;
  if (auto ip = IpAddress::parse(text); ip.ok()) {
    hp.host = text;
    hp.ip = *ip;
    hp.port = 53;
  } else {
    auto parsed = parse_ip_port(text);
    if (!parsed.ok()) return make_error(Code::invalid_argument, "resolver server: " + parsed.error().message);
    hp = std::move(*parsed);
  }
  // Appended, not `"[" + ...`: that form trips GCC 12's -Wrestrict false positive at
  // -O3 (GCC PR 105329, 105651).
  const bool v6 = hp.ip->family == AF_INET6;
  std::string entry = v6 ? "[" : "";
  entry += hp.ip->to_string();
  entry += v6 ? "]:" : ":";
  entry += std::to_string(hp.port);
  return entry;
}

Result<std::string> servers_csv(const std::vector<std::string>& servers) {
  if (servers.size() > kMaxServers) return make_error(Code::invalid_argument, "at most 8 resolver servers");
  std::string csv;
  for (const auto& s : servers) {
    KIB_TRY_ASSIGN(auto entry, server_entry(s));
    if (!csv.empty()) csv += ",";
    csv += entry;
  }
  return csv;
}

// Lookup outcomes that mean "this name has no usable address right now".
bool does_not_resolve(int status) {
  switch (status) {
    case ARES_ENODATA:
    case ARES_ENOTFOUND:
    case ARES_ETIMEOUT:
    case ARES_ESERVFAIL:
    case ARES_EREFUSED:
    case ARES_ECONNREFUSED:
    case ARES_EFORMERR:
    case ARES_EBADRESP:
    case ARES_ENOTIMP:
    case ARES_EOF:
    case ARES_ECANCELLED: return true;
    default: return false;
  }
}

Result<std::vector<IpAddress>> to_result(int status, const ares_addrinfo* info) {
  std::vector<IpAddress> out;
  if (status == ARES_SUCCESS) {
    for (const ares_addrinfo_node* n = info ? info->nodes : nullptr; n != nullptr && out.size() < kMaxAddresses;
         n = n->ai_next) {
      if (n->ai_addr == nullptr || (n->ai_family != AF_INET && n->ai_family != AF_INET6)) continue;
      const IpAddress a = IpAddress::from_sockaddr(n->ai_addr);
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
    return out;
  }
  if (does_not_resolve(status)) return out;
  if (status == ARES_EBADNAME) return make_error(Code::invalid_argument, "name resolution: bad host name");
  if (status == ARES_ENOMEM) return make_error(Code::resource_exhausted, "name resolution: out of memory");
  if (status == ARES_EDESTRUCTION) return make_error(Code::unavailable, "name resolution: resolver shut down");
  return make_error(Code::internal, std::string("name resolution: ") + ares_strerror(status));
}

}  // namespace

Status validate_resolver_options(const ResolverOptions& options) {
  if (options.timeout.count() <= 0) return make_error(Code::invalid_argument, "resolver timeout must be positive");
  KIB_TRY(servers_csv(options.servers));
  return {};
}

struct AsyncResolver::Lookup {
  AsyncResolver* owner = nullptr;
  uint64_t id = 0;
  Clock::time_point deadline;
  Callback callback;  // empty once it has run
};

AsyncResolver::AsyncResolver(std::chrono::milliseconds timeout, SocketStateHook hook)
    : timeout_(timeout), hook_(std::move(hook)) {}

Result<std::unique_ptr<AsyncResolver>> AsyncResolver::create(const ResolverOptions& options, SocketStateHook hook) {
  KIB_TRY(library_init());
  KIB_TRY(validate_resolver_options(options));
  KIB_TRY_ASSIGN(auto csv, servers_csv(options.servers));

  std::unique_ptr<AsyncResolver> r(new AsyncResolver(options.timeout, std::move(hook)));
  ares_options opts{};
  // Two tries, each a share of the lookup budget; the lookup deadline itself is
  // enforced by expire_lookups(), c-ares' own retry timers only bound its work.
  opts.timeout = static_cast<int>(std::max<int64_t>(50, options.timeout.count() / 2));
  opts.tries = 2;
  opts.sock_state_cb = &AsyncResolver::on_socket_state;
  opts.sock_state_cb_data = r.get();
  char lookups[] = "fb";  // /etc/hosts, then DNS
  opts.lookups = lookups;
  const int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_SOCK_STATE_CB | ARES_OPT_LOOKUPS;
  const int st = ares_init_options(&r->channel_, &opts, mask);
  if (st != ARES_SUCCESS) {
    r->channel_ = nullptr;
    return make_error(Code::internal, std::string("c-ares init: ") + ares_strerror(st));
  }
  if (!csv.empty()) {
    const int ss = ares_set_servers_ports_csv(r->channel_, csv.c_str());
    if (ss != ARES_SUCCESS)
      return make_error(Code::invalid_argument, std::string("resolver servers: ") + ares_strerror(ss));
  }
  return r;
}

AsyncResolver::~AsyncResolver() {
  // ares_destroy runs every pending callback (ARES_EDESTRUCTION) and the socket
  // hook while this object is still whole.
  if (channel_ != nullptr) ares_destroy(channel_);
}

void AsyncResolver::resolve(const std::string& host, Callback callback) {
  // IP literals need no lookup (and must not be read in another notation).
  if (auto ip = IpAddress::parse(host); ip.ok()) {
    callback(std::vector<IpAddress>{*ip});
    return;
  }
  if (host.empty() || host.size() > kMaxHostName || host.find('\0') != std::string::npos) {
    callback(make_error(Code::invalid_argument, "name resolution: bad host name"));
    return;
  }
  if (lookups_.size() >= kMaxLookups) {
    callback(make_error(Code::resource_exhausted, "name resolution: too many lookups in flight"));
    return;
  }
  const uint64_t id = next_id_++;
  auto lookup = std::make_unique<Lookup>();
  lookup->owner = this;
  lookup->id = id;
  lookup->deadline = Clock::now() + timeout_;
  lookup->callback = std::move(callback);
  Lookup* raw = lookup.get();
  lookups_.emplace(id, std::move(lookup));
  ++pending_;
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // No RFC 6724 sorting: it connect()s a UDP socket to every answer, syscalls per
  // address on the dial path; the data plane orders its attempts itself.
  hints.ai_flags = ARES_AI_NOSORT;
  // May call on_result before returning (hosts file, bad name).
  ares_getaddrinfo(channel_, host.c_str(), nullptr, &hints, &AsyncResolver::on_result, raw);
}

void AsyncResolver::on_result(void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
  auto* lookup = static_cast<Lookup*>(arg);
  AsyncResolver* self = lookup->owner;
  Callback cb = std::move(lookup->callback);
  lookup->callback = nullptr;
  const uint64_t id = lookup->id;
  CPtr<ares_freeaddrinfo> owned(result);
  if (cb) {
    --self->pending_;
    auto r = to_result(status, result);
    owned.reset();
    cb(std::move(r));
  }
  owned.reset();
  self->lookups_.erase(id);  // by id: the callback may have added lookups
}

void AsyncResolver::on_socket_state(void* data, int fd, int readable, int writable) {
  auto* self = static_cast<AsyncResolver*>(data);
  const SocketInterest s{fd, readable != 0, writable != 0};
  if (s.read || s.write)
    self->sockets_[fd] = s;
  else
    self->sockets_.erase(fd);
  if (self->hook_) self->hook_(s);
}

std::vector<AsyncResolver::SocketInterest> AsyncResolver::sockets() const {
  std::vector<SocketInterest> out;
  out.reserve(sockets_.size());
  for (const auto& [fd, s] : sockets_) out.push_back(s);
  return out;
}

void AsyncResolver::process_fd(int read_fd, int write_fd) {
  ares_process_fd(channel_, read_fd < 0 ? ARES_SOCKET_BAD : read_fd, write_fd < 0 ? ARES_SOCKET_BAD : write_fd);
  expire_lookups();
}

void AsyncResolver::process_timeouts() {
  ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  expire_lookups();
}

std::optional<std::chrono::milliseconds> AsyncResolver::next_timeout() const {
  if (lookups_.empty()) return std::nullopt;
  const auto now = Clock::now();
  auto best = std::chrono::milliseconds::max();
  for (const auto& [id, l] : lookups_) {
    if (!l->callback) continue;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(l->deadline - now);
    best = std::min(best, std::max(left, std::chrono::milliseconds(0)));
  }
  timeval tv{};
  if (ares_timeout(channel_, nullptr, &tv) != nullptr) {
    const auto ares_ms = std::chrono::milliseconds(int64_t{tv.tv_sec} * 1000 + (tv.tv_usec + 999) / 1000);
    best = std::min(best, ares_ms);
  }
  if (best == std::chrono::milliseconds::max()) return std::nullopt;
  return best;
}

// options.timeout is the bound the caller was promised: a lookup past it reports
// "does not resolve" now; c-ares finishes (and frees) it later on its own timers.
void AsyncResolver::expire_lookups() {
  const auto now = Clock::now();
  std::vector<Lookup*> due;
  for (const auto& [id, l] : lookups_)
    if (l->callback && l->deadline <= now) due.push_back(l.get());
  for (Lookup* l : due) {
    Callback cb = std::move(l->callback);
    l->callback = nullptr;
    --pending_;
    cb(std::vector<IpAddress>{});
  }
}

}  // namespace kib::policy
