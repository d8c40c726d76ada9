// kibotosctl: the operator's CLI for the Kibotos ctrl API (see kibotosctl(1)).
#include <curl/curl.h>

#include <iostream>
#include <string>
#include <vector>

#include "agent/ctl/ctl_main.h"

int main(int argc, char** argv) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    std::cerr << "error: internal: curl_global_init failed\n";
    return 1;
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  const int rc = kib::ctl::run_ctl(args, std::cout, std::cerr, std::getenv("KIBOTOS_SOCKET"));
  std::cout.flush();
  curl_global_cleanup();
  return rc;
}
