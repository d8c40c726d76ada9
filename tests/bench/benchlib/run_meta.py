"""What a bench run records about itself: the machine, the commit, how the agent binary
was built."""
import json
import os
import platform
import subprocess
from datetime import datetime, timezone

SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def git(args):
    r = subprocess.run(["git"] + args, cwd=SOURCE_ROOT, capture_output=True, text=True)
    return r.stdout.strip()


def machine(dirty_paths):
    """Date, commit (and whether `dirty_paths` had uncommitted changes), kernel, CPUs,
    memory and the load average now."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    changed = git(["status", "--porcelain", "--"] + list(dirty_paths)).splitlines()
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git(["rev-parse", "HEAD"]) or "unknown",
            "dirty": bool(changed), "dirty_files": len(changed),
            "kernel": platform.release(), "nproc": os.cpu_count(), "cpu_model": model,
            "mem_total_gib": mem / 1048576, "load_start": " ".join(open("/proc/loadavg").read().split()[:3])}


def agent_build(agent_path):
    """How the agent binary was built, from its meson build dir (when it has one)."""
    info = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(agent_path))),
                        "meson-info", "intro-buildoptions.json")
    try:
        with open(info) as f:
            opts = {o["name"]: o["value"] for o in json.load(f)}
        return f"buildtype {opts.get('buildtype')}, sanitizers {opts.get('b_sanitize') or 'none'}"
    except (OSError, ValueError, KeyError):
        return "unknown build"
