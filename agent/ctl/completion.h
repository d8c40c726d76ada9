#pragma once
// Shell-completion candidates (`kibotosctl __complete WORDS...`), from the command
// table and the builtins, so every shell's script follows the table.
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "agent/ctl/command_table.h"
#include "agent/ctl/connect_client.h"

namespace kib::ctl {

// Where candidates beyond the table come from; tests point them elsewhere.
struct CompletionSources {
  std::string netns_dir = "/run/netns";
  const char* env_socket = nullptr;  // $KIBOTOS_SOCKET
  // The IDs `cmd`'s positional may take; empty on any failure.
  std::function<std::vector<std::string>(const CommandSpec& cmd, const Endpoint& endpoint)> ids;
};

// How long completion waits for the agent's list of IDs, in all.
inline constexpr uint32_t kCompletionTimeoutMs = 1000;

// `words` are the words after "kibotosctl", the last being the one under the cursor.
// One candidate per line; "__files__" alone asks the shell to complete file names.
std::string completion_candidates(const std::vector<std::string>& words, const CompletionSources& sources = {});

// `kibotosctl __complete WORDS...` with the real sources (/run/netns, the agent).
void print_completions(const std::vector<std::string>& words, std::ostream& out, const char* env_socket);

}  // namespace kib::ctl
