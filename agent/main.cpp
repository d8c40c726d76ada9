// kibotos-agent: the per-host Kibotos agent (see agent/daemon/daemon.h).
#include <string>
#include <vector>

#include "agent/daemon/daemon.h"

int main(int argc, char** argv) { return kib::daemon::run(std::vector<std::string>(argv + 1, argv + argc)); }
