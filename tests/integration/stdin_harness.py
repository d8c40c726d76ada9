"""A test harness program run in the root namespace and commanded one line at a time
over stdin (relay_harness, dns_harness): it answers "ready" once, then one line per
command ("ok" or a result)."""
import os
import select
import subprocess
import time


class StdinHarness:
    def __init__(self, binary, lab, *flags):
        self.name = binary.rsplit("/", 1)[-1]
        self._log = ""  # stderr read by wait_log, not yet looked at
        args = [binary, "--allow", "10.0.0.0/8", "--allow", "fd00::/8", *map(str, flags)]
        self.proc = lab.popen(None, *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.read_line(10) == "ready"

    def wait_log(self, text, timeout=10):
        """Reads the harness's log (stderr) until a line containing text; returns it.
        Reads the pipe itself (os.read, its own buffer): select() on a buffered reader
        would miss a line that came in the same chunk as the one before it."""
        deadline = time.monotonic() + timeout
        while True:
            while "\n" in self._log:
                line, self._log = self._log.split("\n", 1)
                if text in line:
                    return line.strip()
            r, _, _ = select.select([self.proc.stderr], [], [], max(deadline - time.monotonic(), 0))
            if not r:
                raise TimeoutError(f"{self.name} did not log {text!r}")
            chunk = os.read(self.proc.stderr.fileno(), 65536)
            if not chunk:
                raise EOFError(f"{self.name} exited before logging {text!r}")
            self._log += chunk.decode(errors="replace")

    def read_line(self, timeout=10):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise TimeoutError(f"{self.name} did not answer")
        return self.proc.stdout.readline().strip()

    def cmd(self, line, expect_ok=True):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.read_line()
        if expect_ok:
            assert out == "ok", f"{line!r} -> {out}"
        return out
