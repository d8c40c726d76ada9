#include "agent/ctl/command_id.h"

#include <sys/random.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace kib::ctl {

std::string random_command_id() {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) std::abort();  // the kernel's CSPRNG is not expected to fail
    got += static_cast<size_t>(n);
  }
  std::string out = "ctl-";
  char hex[3];
  for (uint8_t b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    out += hex;
  }
  return out;
}

}  // namespace kib::ctl
