#include "agent/daemon/host_check.h"

#include <unistd.h>

#include <filesystem>

#include "agent/api/http/tls_context.h"
#include "agent/api/http/unix_listener.h"
#include "agent/common/errno_error.h"

namespace kib::daemon {
namespace {

// The start creates the file (O_CREAT) but not its folder.
Status check_access_log_folder(const std::string& path) {
  if (path.empty() || path == "journal") return {};
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return errno_error("log.access.path " + path + ": its folder " + dir, errno, Code::failed_precondition);
  return {};
}

}  // namespace

Status check_host_prerequisites(const Config& config) {
  if (!config.api.unix_socket_group.empty()) KIB_TRY(api::lookup_socket_group(config.api.unix_socket_group));
  if (!config.api.tls.listen.empty()) KIB_TRY(api::make_server_tls_context(config.api.tls));
  return check_access_log_folder(config.access_log.path);
}

}  // namespace kib::daemon
