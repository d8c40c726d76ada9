#include "agent/daemon/effective_config.h"

#include <cstdlib>

#include "agent/policy/ip_address.h"

namespace kib::daemon {
namespace {

// systemd passes several directories separated by ':'; ours is the first.
std::string first_dir(const char* env) {
  if (env == nullptr || *env == '\0') return {};
  std::string v(env);
  return v.substr(0, v.find(':'));
}

}  // namespace

Config environment_defaults() {
  Config c;
  if (std::string d = first_dir(std::getenv("STATE_DIRECTORY")); !d.empty()) c.state_dir = d;
  if (std::string d = first_dir(std::getenv("RUNTIME_DIRECTORY")); !d.empty()) c.api.unix_socket = d + "/ctrl.sock";
  return c;
}

Status check_config_cidrs(const Config& config) {
  const auto& cidrs = config.egress.allowed_special_purpose_cidrs;
  for (size_t i = 0; i < cidrs.size(); ++i) {
    auto c = policy::Cidr::parse(cidrs[i]);
    if (!c.ok())
      return Error{Code::invalid_argument,
                   "egress.allowed_special_purpose_cidrs[" + std::to_string(i) + "]: " + c.error().message};
  }
  return {};
}

Result<Config> load_effective_config(const std::string& file) {
  Config defaults = environment_defaults();
  auto config = file.empty() ? Result<Config>(defaults) : load_config_file(file, defaults);
  if (!config.ok()) return config;
  if (auto st = check_config_cidrs(*config); !st.ok()) {
    if (file.empty()) return std::move(st).error();
    return Error{Code::invalid_argument, file + ": " + st.error().message};
  }
  return config;
}

}  // namespace kib::daemon
