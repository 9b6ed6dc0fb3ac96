"""The resident memory of this process, read from Linux's ``/proc``: now, at its peak, and the
peak made to forget what came before.

What a piece of work adds is ``peak_rss_bytes() - before`` where ``before = rss_bytes()`` was read
just before it and `reset_peak_rss` was called. Used by the benchmarks and the long-range sweep to
measure memory above the fixed floor of a process that imports torch and DGL (several hundred MiB).
"""

from __future__ import annotations

import os
import resource


def rss_bytes() -> int:
    """Resident set size now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Make the kernel forget this process's peak resident set (VmHWM); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """The largest resident set since the process started or `reset_peak_rss` last succeeded."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
