"""What systemd does for a Type=notify service with FileDescriptorStoreMax=, for
machines where systemd is not PID 1 (this one, CI): the notify socket (READY=1,
STOPPING=1, MAINPID=, BARRIER=1), the file-descriptor store (FDSTORE=1, FDNAME=,
FDSTOREREMOVE=1, the FileDescriptorStoreMax= cap) and, on `systemctl restart`, the
start of the next process with the stored fds at 3.. ($LISTEN_FDS, $LISTEN_FDNAMES,
$LISTEN_PID). On `systemctl stop` the store closes. Only what the agent uses.

    agent = SystemdAgent(config=...)        # kibotos_agent.Agent, started "by systemd"
    agent.start()
    agent.systemctl_restart()               # SIGTERM, wait, start with the store
"""
import os
import socket
import subprocess
import sys
import threading

import kibotos_agent

# The fds systemd passes: moved above the wrapper's own, then to 3.. without
# close-on-exec, then $LISTEN_PID names the process that execs the agent.
_EXEC = r"""
import fcntl, os, sys
n = int(sys.argv[1])
fds = [int(x) for x in sys.argv[2:2 + n]]
argv = sys.argv[3 + n:]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 1000) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i, inheritable=True)
    os.close(fd)
if n:
    os.environ["LISTEN_FDS"] = str(n)
    os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(argv[0], argv)
"""


class FdStoreManager:
    def __init__(self, workdir, store_max=4):
        self.path = os.path.join(workdir, "notify.sock")
        self.store_max = store_max
        self.store = []       # (name, fd), in the order given
        self.messages = []    # each message's text, in order
        self.dropped = 0      # fds refused: the store was full
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.settimeout(0.2)
        self._closing = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def env(self):
        # $FDSTORE: what systemd 254+ sets and the shipped unit sets for older ones.
        return {"NOTIFY_SOCKET": self.path, "FDSTORE": str(self.store_max)}

    def _serve(self):
        while not self._closing:
            try:
                data, anc, _, _ = self._sock.recvmsg(65536, socket.CMSG_SPACE(253 * 4))
            except socket.timeout:
                continue
            except OSError:
                return
            fds = []
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += list(memoryview(payload[:len(payload) - len(payload) % 4]).cast("i"))
            self._handle(data.decode(errors="replace"), fds)

    def _handle(self, text, fds):
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        with self._lock:
            self.messages.append(text)
            if fields.get("FDSTORE") == "1":
                for fd in fds:
                    if len(self.store) < self.store_max:
                        self.store.append((fields.get("FDNAME", "stored"), fd))
                    else:
                        self.dropped += 1
                        os.close(fd)
                return
            if fields.get("FDSTOREREMOVE") == "1":
                keep = []
                for name, fd in self.store:
                    if name == fields.get("FDNAME"):
                        os.close(fd)
                    else:
                        keep.append((name, fd))
                self.store = keep
            for fd in fds:  # BARRIER=1: closing its fd answers it
                os.close(fd)

    def stored_names(self):
        with self._lock:
            return [name for name, _ in self.store]

    def saw(self, text):
        with self._lock:
            return sum(1 for m in self.messages if text in m)

    def spawn(self, argv, stdout, env):
        """Starts argv as systemd starts the service: the stored fds at 3.."""
        with self._lock:
            names = [name for name, _ in self.store]
            fds = [fd for _, fd in self.store]
        env = {k: v for k, v in env.items() if not k.startswith("LISTEN_")}
        if fds:
            env["LISTEN_FDNAMES"] = ":".join(names)
        return subprocess.Popen([sys.executable, "-c", _EXEC, str(len(fds))] + [str(fd) for fd in fds] + ["--"]
                                + list(argv), pass_fds=fds, env=env, stdout=stdout, stderr=subprocess.STDOUT)

    def flush(self):
        """The service stopped with no restart queued: systemd closes the store."""
        with self._lock:
            for _, fd in self.store:
                os.close(fd)
            self.store = []

    def close(self):
        self._closing = True
        self._thread.join(timeout=5)
        self._sock.close()
        self.flush()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class SystemdAgent(kibotos_agent.Agent):
    """An Agent whose process a FdStoreManager starts, as systemd would."""

    def __init__(self, store_max=4, **kw):
        super().__init__(**kw)
        self.manager = FdStoreManager(self.workdir, store_max)
        self.env.update(self.manager.env())

    def start(self, wait=True, timeout=15.0):
        self.write_config()
        if self._log is None:
            self._log = open(self.log_path, "ab")
        self.proc = self.manager.spawn([kibotos_agent.agent_binary(), "--config", self.config_path] + self.args,
                                       self._log, self.env)
        if wait:
            self.wait_ready(timeout)
        return self

    def systemctl_restart(self, timeout=30.0):
        """SIGTERM, the exit (the store stays: a restart job runs), the next start.
        Returns the old process's exit code."""
        old = self.proc
        old.terminate()
        code = old.wait(timeout)
        self.start(timeout=timeout)
        return code

    def systemctl_stop(self, timeout=30.0):
        code = self.stop(timeout=timeout)
        self.manager.flush()
        return code

    def cleanup(self):
        try:
            super().cleanup()
        finally:
            self.manager.close()
