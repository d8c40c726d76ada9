#!/usr/bin/env python3
"""The scripts of `kibotosctl completion bash|zsh|fish`, run in each shell installed.

bash and fish complete for real (bash calls the function as its completion does, fish
has `complete -C`); zsh runs the function with compadd/_files/compdef stubbed, both
sourced and autoloaded from $fpath. A shell that is not installed is skipped.
Usage: completion_scripts_test.py KIBOTOSCTL
"""
import os
import shutil
import subprocess
import sys
import tempfile

CTL = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, PATH=os.path.dirname(CTL) + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
           KIBOTOS_SOCKET="/nonexistent/kibotos-completion-test.sock")
failures = []


def run(argv, cwd):
    r = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError(f"{argv[0]} exited {r.returncode}: {r.stderr}")
    return r.stdout


def check(shell, line, got, want):
    if got != want:
        failures.append(f"{shell}: {line!r}: got {got!r}, want {want!r}")


# (words after "kibotosctl", the last under the cursor) -> candidates, sorted
CASES = [
    (["eg"], ["egress"]),
    ([""], ["agent", "completion", "egress", "help", "workspace"]),
    (["egress", "create", "--u"], ["--udp-enabled", "--username"]),
    (["workspace", "up"], ["update-policy"]),
    (["completion", ""], ["bash", "fish", "zsh"]),
    (["egress", "create", "--password-file", "pw"], ["pw1.txt", "pw2.txt"]),
    (["egress", "get", ""], []),  # no agent: no IDs, and no error text
    (["frob", ""], []),
]


def bash(tmp):
    script = os.path.join(tmp, "kibotosctl.bash")
    with open(script, "w") as f:
        f.write(run([CTL, "completion", "bash"], tmp))
    for words, want in CASES:
        quoted = " ".join("'" + w + "'" for w in ["kibotosctl"] + words)
        out = run(["bash", "-c", f'source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _kibotosctl; '
                   'printf "%s\\n" "${COMPREPLY[@]}"'], tmp)
        check("bash", words, sorted(filter(None, out.split("\n"))), want)


def fish(tmp):
    for words, want in CASES:
        line = " ".join(["kibotosctl"] + words)
        out = run(["fish", "--no-config", "-c", f'kibotosctl completion fish | source; complete -C "{line}"'], tmp)
        check("fish", words, sorted(l.split("\t")[0] for l in out.split("\n") if l), want)


ZSH_STUBS = ('compdef() { print -r -- "compdef $*" }; compadd() { print -rl -- "${@[2,-1]}" }; '
             '_files() { print -r -- "${PREFIX}"pw1.txt; print -r -- "${PREFIX}"pw2.txt }; ')


def zsh(tmp):
    fdir = os.path.join(tmp, "fpath")
    os.mkdir(fdir)
    with open(os.path.join(fdir, "_kibotosctl"), "w") as f:
        f.write(run([CTL, "completion", "zsh"], tmp))
    for how, load in (("sourced", "source <(kibotosctl completion zsh); "),
                      ("autoloaded", f"fpath=({fdir} $fpath); autoload -Uz _kibotosctl; ")):
        for words, want in CASES:
            quoted = " ".join("'" + w + "'" for w in ["kibotosctl"] + words)
            out = run(["zsh", "-fc", ZSH_STUBS + load + f"words=({quoted}); CURRENT={len(words) + 1}; PREFIX=; "
                       "_kibotosctl; true"], tmp)
            got = sorted(l for l in out.split("\n") if l and not l.startswith("compdef "))
            check(f"zsh ({how})", words, got, want)
            if how == "sourced" and "compdef _kibotosctl kibotosctl" not in out:
                failures.append("zsh: sourcing the script does not register it with compdef")


def main():
    ran = []
    with tempfile.TemporaryDirectory(prefix="kibotosctl-completion-") as tmp:
        for name in ("pw1.txt", "pw2.txt"):
            open(os.path.join(tmp, name), "w").close()
        for shell, test in (("bash", bash), ("fish", fish), ("zsh", zsh)):
            if shutil.which(shell) is None:
                print(f"SKIP {shell}: not installed")
                continue
            test(tmp)
            ran.append(shell)
    for f in failures:
        print("FAIL", f)
    print("ran:", ", ".join(ran))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
