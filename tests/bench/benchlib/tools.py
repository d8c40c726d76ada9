"""The bench's own C tools (tests/bench/tools/*.c: bench_client, bench_server), built
for each run into its work dir."""
import os
import subprocess

TOOLS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")


def build_tools(workdir):
    """Compiles bench_client and bench_server into workdir: {"client": path, "server": path}."""
    out = {}
    for name in ("client", "server"):
        path = os.path.join(workdir, f"bench_{name}")
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", path,
                        os.path.join(TOOLS_DIR, f"bench_{name}.c")], check=True, timeout=120)
        out[name] = path
    return out
