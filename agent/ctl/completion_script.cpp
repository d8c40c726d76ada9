#include "agent/ctl/completion_script.h"

namespace kib::ctl {
namespace {

// "__files__" alone means: complete file names.
constexpr std::string_view kBash = R"(# bash completion for kibotosctl(1). The candidates come from kibotosctl itself
# (`kibotosctl __complete WORDS...`), so they always match its command table.
_kibotosctl() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local out
  out=$(kibotosctl __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return
  if [[ $out == __files__ ]]; then
    compopt -o filenames 2>/dev/null
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  else
    mapfile -t COMPREPLY <<<"$out"
    [[ -z ${COMPREPLY[0]} ]] && COMPREPLY=()
  fi
}
complete -F _kibotosctl kibotosctl
)";

// Works both autoloaded from $fpath (the file's body is the function _kibotosctl) and
// sourced (it registers the function with compdef).
constexpr std::string_view kZsh = R"(#compdef kibotosctl
# zsh completion for kibotosctl(1). The candidates come from kibotosctl itself
# (`kibotosctl __complete WORDS...`), so they always match its command table.
_kibotosctl() {
  local out
  local -a candidates
  out=$(kibotosctl __complete "${(@)words[2,CURRENT]}" 2>/dev/null) || return 1
  if [[ $out == __files__ ]]; then
    _files
    return
  fi
  candidates=("${(@f)out}")
  candidates=(${candidates:#})
  (( ${#candidates} )) || return 1
  compadd -- "${candidates[@]}"
}
if [[ ${funcstack[1]} == _kibotosctl ]]; then
  _kibotosctl "$@"
else
  compdef _kibotosctl kibotosctl
fi
)";

constexpr std::string_view kFish = R"(# fish completion for kibotosctl(1). The candidates come from kibotosctl itself
# (`kibotosctl __complete WORDS...`), so they always match its command table.
function __kibotosctl_complete
    set -l words (commandline -opc) (commandline -ct)
    set -l out (kibotosctl __complete $words[2..-1] 2>/dev/null)
    or return
    if test "$out" = __files__
        __fish_complete_path (commandline -ct)
        return
    end
    test (count $out) -gt 0
    and printf '%s\n' $out
end
complete -c kibotosctl -f -a '(__kibotosctl_complete)'
)";

}  // namespace

std::string_view completion_script(std::string_view shell) {
  if (shell == "bash") return kBash;
  if (shell == "zsh") return kZsh;
  if (shell == "fish") return kFish;
  return {};
}

}  // namespace kib::ctl
