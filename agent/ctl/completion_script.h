#pragma once
// `kibotosctl completion bash|zsh|fish`: the shell's completion script. Each script
// asks `kibotosctl __complete WORDS...` for the candidates, so it follows the command
// table without being regenerated; the packages install the same text (packaging/).
#include <string_view>

namespace kib::ctl {

// The script for `shell` ("bash", "zsh" or "fish"); empty for another name.
std::string_view completion_script(std::string_view shell);

}  // namespace kib::ctl
