#pragma once
// kibotos-agent's command line.
#include <string>
#include <vector>

#include "agent/common/result.h"

namespace kib::daemon {

struct Options {
  std::string config_file;  // empty: the embedded defaults only
  bool check_config = false;
  bool print_config = false;
  bool version = false;
  bool help = false;
  bool take_over = false;  // take the API and the store from the running agent
};

Result<Options> parse_options(const std::vector<std::string>& args);
const char* usage();

}  // namespace kib::daemon
