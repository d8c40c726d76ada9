"""A test harness program run in the root namespace and commanded one line at a time
over stdin (relay_harness, dns_harness): it answers "ready" once, then one line per
command ("ok" or a result)."""
import select
import subprocess


class StdinHarness:
    def __init__(self, binary, lab, *flags):
        self.name = binary.rsplit("/", 1)[-1]
        args = [binary, "--allow", "10.0.0.0/8", "--allow", "fd00::/8", *map(str, flags)]
        self.proc = lab.popen(None, *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.read_line(10) == "ready"

    def wait_log(self, text, timeout=10):
        """Reads the harness's log (stderr) until a line containing text; returns it."""
        import time
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            r, _, _ = select.select([self.proc.stderr], [], [], max(left, 0))
            if not r:
                raise TimeoutError(f"{self.name} did not log {text!r}")
            line = self.proc.stderr.readline()
            if not line:
                raise EOFError(f"{self.name} exited before logging {text!r}")
            if text in line:
                return line.strip()

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
