"""Starts danted in a lab namespace, optionally with RFC 1929 users that exist only in
a private mount namespace (bind-mounted passwd/shadow): the host's files are untouched."""
import os
import subprocess
import tempfile


def popen_danted(lab, conf, user=None, password=None):
    if not user:
        return lab.popen(lab.socks, "/usr/sbin/danted", "-f", conf, "-N", "1")
    hashed = subprocess.run(["openssl", "passwd", "-6", password], capture_output=True, text=True,
                            check=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="kib-dante-users-")
    with open("/etc/passwd") as f:
        passwd = f.read()
    with open(os.path.join(tmp, "passwd"), "w") as f:
        f.write(passwd + f"{user}:x:4242:4242::/nonexistent:/usr/sbin/nologin\n")
    with open(os.path.join(tmp, "shadow"), "w") as f:
        f.write(f"root:*:19000:0:99999:7:::\n{user}:{hashed}:19000:0:99999:7:::\n")
    os.chmod(os.path.join(tmp, "shadow"), 0o600)
    script = (f"mount --bind {tmp}/passwd /etc/passwd && mount --bind {tmp}/shadow /etc/shadow && "
              f"exec /usr/sbin/danted -f {conf} -N 1")
    return lab.popen(lab.socks, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
