"""A test harness program run in the root namespace and commanded one line at a time
over stdin (relay_harness, dns_harness): it answers "ready" once, then one line per
command ("ok" or a result)."""
import os
import select
import subprocess
import time


class _Lines:
    """A pipe read line by line with a deadline. Reads the fd itself (os.read into its
    own buffer): select() on a buffered reader would miss a line that came in the same
    chunk as the one before it."""

    def __init__(self, pipe):
        self.fd = pipe.fileno()
        self.buf = ""

    def next(self, deadline):
        """The next line (stripped); None at EOF; raises TimeoutError at the deadline."""
        while "\n" not in self.buf:
            r, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
            if not r:
                raise TimeoutError
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk.decode(errors="replace")
        line, self.buf = self.buf.split("\n", 1)
        return line.strip()


class StdinHarness:
    def __init__(self, binary, lab, *flags):
        self.name = binary.rsplit("/", 1)[-1]
        args = [binary, "--allow", "10.0.0.0/8", "--allow", "fd00::/8", *map(str, flags)]
        self.proc = lab.popen(None, *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, bufsize=1)
        self._out, self._log = _Lines(self.proc.stdout), _Lines(self.proc.stderr)
        assert self.read_line(10) == "ready"

    def wait_log(self, text, timeout=10):
        """Reads the harness's log (stderr) until a line containing text; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._log.next(deadline)
            except TimeoutError:
                raise TimeoutError(f"{self.name} did not log {text!r}") from None
            if line is None:
                raise EOFError(f"{self.name} exited before logging {text!r}")
            if text in line:
                return line

    def read_line(self, timeout=10):
        """The next answer line; "" once the harness has exited."""
        try:
            line = self._out.next(time.monotonic() + timeout)
        except TimeoutError:
            raise TimeoutError(f"{self.name} did not answer") from None
        return "" if line is None else line

    def cmd(self, line, expect_ok=True):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.read_line()
        if expect_ok:
            assert out == "ok", f"{line!r} -> {out}"
        return out
