"""Take one attachment's lock again and again while its lock file comes and goes (test_locks.py).

Usage (one worker process)::

    python lock_worker.py CACHE_DIR SECONDS SEED

Prints the number of overlaps seen: times a holder found another holder
inside. The test also imports :func:`hammer` to run the same loop in threads.
Half of the holders leave an entry behind and half remove it, so that the
lock file is removed on release about every other time (behaviour.md §7),
and waiters keep waking up on removed files.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time

from libcni.cache import ResultCache

ATTACHMENT = ("net", "c1", "eth0")
INSIDE = "inside"  # created exclusively by each holder, in the cache directory


def hammer(cache_dir: str, seconds: float, seed: int) -> int:
    """Lock, check that no one else is inside, maybe toggle the entry, unlock; return overlaps."""
    rng = random.Random(seed)
    cache = ResultCache(cache_dir)
    entry = cache.entry_path(*ATTACHMENT)
    marker = os.path.join(cache_dir, INSIDE)
    overlaps = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        with cache.lock(*ATTACHMENT):
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                overlaps += 1
                continue
            os.close(fd)
            if rng.random() < 0.5:
                os.makedirs(os.path.dirname(entry), mode=0o700, exist_ok=True)
                with open(entry, "w") as f:
                    f.write("{}")
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry)
            if rng.random() < 0.3:
                time.sleep(0.0005)
            os.unlink(marker)
    return overlaps


def main(argv: list[str]) -> int:
    print(hammer(argv[0], float(argv[1]), int(argv[2])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
