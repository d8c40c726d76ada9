#include "agent/daemon/options.h"

namespace kib::daemon {

const char* usage() {
  return "usage: kibotos-agent [--config FILE] [--take-over] [--check-config] [--print-config] [--version]\n"
         "                     [--help]\n"
         "  --config FILE    read the YAML configuration from FILE (every key is optional)\n"
         "  --take-over      take over from the agent running on the same state dir: its API\n"
         "                   and store move here without a gap, it keeps relaying its\n"
         "                   connections until they end (restart.drain_timeout), then exits;\n"
         "                   with none running, start as usual\n"
         "  --check-config   check the configuration and what the start needs from this host\n"
         "                   (the socket's group, the TLS files, the access log's folder);\n"
         "                   print \"config OK\" or the error, exit\n"
         "  --print-config   check as --check-config, then print every key with the value in\n"
         "                   force (the file's, else the embedded default), one per line, exit\n"
         "  --version        print the version and exit\n"
         "  --help           print this help and exit\n";
}

Result<Options> parse_options(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config") {
      if (i + 1 >= args.size()) return Error{Code::invalid_argument, "--config needs a file name"};
      o.config_file = args[++i];
    } else if (a.starts_with("--config=")) {
      o.config_file = a.substr(9);
    } else if (a == "--take-over") {
      o.take_over = true;
    } else if (a == "--check-config") {
      o.check_config = true;
    } else if (a == "--print-config") {
      o.print_config = true;
    } else if (a == "--version") {
      o.version = true;
    } else if (a == "--help" || a == "-h") {
      o.help = true;
    } else {
      return Error{Code::invalid_argument, "unknown argument: " + a};
    }
  }
  return o;
}

}  // namespace kib::daemon
