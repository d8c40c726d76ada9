"""What a process holds: its fds, and its direct descriptors (io_uring fixed
files are not fds, so /proc/PID/fd does not show them). Shared by the data-plane
tests and the bench."""
import os
import time


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def ring_slots(pid):
    """Direct descriptors (io_uring fixed files) that pid's rings hold: the kernel
    lists each used slot as "N: path" after UserFiles in the ring's fdinfo. It
    prints that part only when it gets the ring's lock at once, so a busy ring's
    fdinfo is read again."""
    used = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "io_uring" not in os.readlink(f"/proc/{pid}/fd/{fd}"):
                continue
            for _ in range(200):
                lines = open(f"/proc/{pid}/fdinfo/{fd}").read().split("\n")
                at = next((i for i, line in enumerate(lines) if line.startswith("UserFiles:")), None)
                if at is not None:
                    break
                time.sleep(0.005)
            else:
                raise AssertionError(f"fdinfo of ring fd {fd} of {pid} stayed locked")
        except OSError:
            continue  # closed meanwhile
        for line in lines[at + 1:]:
            if not line.split(":", 1)[0].strip().isdigit():
                break
            used += 1
    return used
