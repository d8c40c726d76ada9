"""Many bare network namespaces (only lo, up), made and removed in bulk: the guests of
a scale test or of the scale benchmark (tests/bench/scale.py).

    pool = NetnsPool("kbsc")          # names kbsc<pid>n<i>, paths /run/netns/<name>
    paths = pool.add(300)             # `ip -batch` netns add, then lo up in each
    ...
    pool.remove_all()                 # every namespace of this pool (also at exit)

A pool's names carry its process's pid; `remove_stale(prefix)` removes namespaces left
by a process of the same prefix that is gone (a run that was killed). Namespaces are
only ever removed by name, never by pattern beyond this pool's own prefix.
"""
import atexit
import ctypes
import fcntl
import os
import socket
import struct
import subprocess

NETNS_DIR = "/run/netns"
IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "ip"
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
BATCH = 500  # commands per `ip -batch` run

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _ip_batch(lines, check=True):
    for k in range(0, len(lines), BATCH):
        chunk = lines[k:k + BATCH]
        p = subprocess.run([IP, "-force", "-batch", "-"], input="\n".join(chunk) + "\n", text=True,
                           capture_output=True, timeout=120)
        if check and p.returncode != 0:
            raise RuntimeError(f"ip -batch ({chunk[0]} ...): {p.stderr.strip()[-500:]}")


def lo_up(paths):
    """Sets lo up in each namespace: this thread enters it (setns), an ioctl, and comes
    back to its own namespace, whatever fails."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                _setns(fd)
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    ifr = struct.pack("16sh22x", b"lo", 0)
                    flags = struct.unpack("16sh22x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
                    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
                finally:
                    s.close()
            finally:
                _setns(own)
                os.close(fd)
    finally:
        os.close(own)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def remove_stale(prefix):
    """Removes namespaces <prefix><pid>n<i> whose <pid> is not a running process."""
    stale = []
    for name in os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else ():
        if not name.startswith(prefix):
            continue
        pid, sep, idx = name[len(prefix):].partition("n")
        if sep and pid.isdigit() and idx.isdigit() and not _alive(int(pid)):
            stale.append(name)
    _ip_batch([f"netns del {n}" for n in stale], check=False)
    return stale


class NetnsPool:
    def __init__(self, prefix):
        self.prefix = f"{prefix}{os.getpid()}n"
        self.names = []
        atexit.register(self.remove_all)

    def name(self, i):
        return f"{self.prefix}{i}"

    @staticmethod
    def path(name):
        return os.path.join(NETNS_DIR, name)

    def add(self, n):
        """n new namespaces (lo up); returns their paths."""
        names = [self.name(len(self.names) + k) for k in range(n)]
        self.names += names  # before creating: a failure half way is still removed
        _ip_batch([f"netns add {name}" for name in names])
        paths = [self.path(name) for name in names]
        lo_up(paths)
        return paths

    def remove(self, paths):
        names = [os.path.basename(p) for p in paths]
        _ip_batch([f"netns del {n}" for n in names], check=False)
        self.names = [n for n in self.names if n not in set(names)]

    def remove_all(self):
        """Every namespace of this pool, plus any other with this pool's prefix (one a
        failed `ip -batch` made before it stopped)."""
        mine = set(self.names)
        if os.path.isdir(NETNS_DIR):
            mine |= {n for n in os.listdir(NETNS_DIR) if n.startswith(self.prefix)}
        _ip_batch([f"netns del {n}" for n in sorted(mine)], check=False)
        self.names = []


def run_in(path, script, timeout=30):
    """Runs `sh -c script` inside the namespace at path (`ip netns exec` by name)."""
    return subprocess.run([IP, "netns", "exec", os.path.basename(path), "sh", "-c", script],
                          capture_output=True, text=True, timeout=timeout)


def leftovers(path):
    """What an agent left in a namespace: its nftables table and policy-routing rules
    (any rule beyond the kernel's three defaults). '' when clean."""
    p = run_in(path, "nft list tables; echo ---; ip -4 rule; echo ---; ip -6 rule")
    nft, rule4, rule6 = (p.stdout.split("---\n") + ["", "", ""])[:3]
    out = []
    if "kibotos" in nft:
        out.append("nft: " + " ".join(nft.split()))
    defaults = ("from all lookup local", "from all lookup main", "from all lookup default")
    for fam, text in (("ipv4", rule4), ("ipv6", rule6)):
        extra = [line.strip() for line in text.splitlines()
                 if line.strip() and not any(line.strip().endswith(d) for d in defaults)]
        if extra:
            out.append(f"{fam} rules: {extra}")
    if p.returncode != 0:
        out.append(f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    return "; ".join(out)
