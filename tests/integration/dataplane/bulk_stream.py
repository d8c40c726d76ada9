"""The bytes bulk transfers carry: 1 MiB blocks of seeded pseudo-random bytes, so no
two aligned chunks repeat and a reordered, duplicated or lost chunk of any size
changes the sha256 (a repeating pattern would hide reordering)."""
import random

MIB = 1 << 20


def block(i):
    return random.Random(i).randbytes(MIB)
