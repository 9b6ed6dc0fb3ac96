"""CPU threads: how many torch computes with, and how they wait for each other.

torch's pip wheels run their CPU kernels on GNU OpenMP (libgomp). A thread that has done its share
of a parallel region waits for the next one by spinning ``GOMP_SPINCOUNT`` times (300,000 unless
told) before it sleeps. On cores of its own that saves a wake-up; on cores shared with other busy
processes it burns the time slice that the thread it waits for needs, and every region waits for
the slowest, descheduled thread: the copy demo's 2-thread training fell to a fraction of its
speed beside other work. Sleeping at once holds up there but is slower than 1 thread on free cores;
a short spin keeps free cores' speed and does not collapse beside other work (docs/results.md,
"Training on shared cores"). So the defaults are:

* wait policy: unless the environment sets ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` itself, a
  short spin (``GOMP_SPINCOUNT=10000``: as fast as libgomp's own on free cores) where the cores are
  free when the command starts, and ``OMP_WAIT_POLICY=passive`` where other processes keep half of
  them busy then (`choose_wait`, measured over a tenth of a second). libgomp reads it once, when
  torch loads it: the ``graphformer`` command chooses before any command imports torch (in a
  Python session, set the variable before ``import torch``).
* thread count: ``--threads N``, else ``OMP_NUM_THREADS`` for one process, else the physical cores
  this process may use, shared among the run's processes on this machine (`default_threads`).

This module imports torch only inside `use_threads`, so the command can call `choose_wait_here` first.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, MutableMapping

# The environment variables by which a user chooses how libgomp's threads wait: either one set
# means the choice is theirs.
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# How the command's threads wait, by whether other work already keeps the cores busy when it
# starts: a short spin (a thirtieth of libgomp's 300,000) on free cores, sleeping at once on busy ones.
FREE_CORES_WAIT = {"GOMP_SPINCOUNT": "10000"}
BUSY_CORES_WAIT = {"OMP_WAIT_POLICY": "passive"}


def choose_wait(
    environ: MutableMapping[str, str], torch_loaded: bool, others_busy: Callable[[], float], cores: int
) -> dict:
    """Set how OpenMP's threads wait in ``environ``, unless a wait setting is there already or
    torch (with its libgomp) is loaded, when it would no longer be read: `BUSY_CORES_WAIT` where
    other processes keep at least half of the ``cores`` this process may use busy (``others_busy()``
    cores' worth, measured only when a choice is to be made), else `FREE_CORES_WAIT`. Processes
    started from this one inherit it. Returns what was set."""
    if torch_loaded or any(name in environ for name in WAIT_SETTINGS):
        return {}
    chosen = BUSY_CORES_WAIT if others_busy() >= cores / 2 else FREE_CORES_WAIT
    environ.update(chosen)
    return chosen


def choose_wait_here(environ: MutableMapping[str, str]) -> dict:
    """`choose_wait` for this process, with the cores it may use and how busy others keep them now."""
    return choose_wait(environ, torch_loaded(), others_busy_cores, len(os.sched_getaffinity(0)))


def others_busy_cores(seconds: float = 0.1) -> float:
    """How many cores' worth of CPU time the machine spent busy over ``seconds`` while this
    process slept (so all of it is others'): from /proc/stat's first line, user to steal less idle
    and iowait. Where /proc/stat cannot be read, the 1-minute load average (which lags a minute)."""

    def busy_seconds() -> float:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(t) for t in f.readline().split()[1:9]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")

    try:
        before = busy_seconds()
        time.sleep(seconds)
        return (busy_seconds() - before) / seconds
    except (OSError, ValueError):
        return os.getloadavg()[0]


def torch_loaded() -> bool:
    return "torch" in sys.modules


def default_threads() -> int:
    """The physical cores this process may use, shared among the run's processes on this machine
    (hyper-threads add little to BLAS kernels and contend for the same units). OMP_NUM_THREADS,
    where set, is the user's own choice and wins for one process; for several it is not read,
    since torchrun sets it to 1 for every process itself (``--threads`` chooses there)."""
    from graphformer.training.distributed import local_processes

    processes = local_processes()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if processes == 1 and omp.isdigit() and int(omp) > 0:
        return int(omp)
    logical = len(os.sched_getaffinity(0))
    per_core = max(1, os.cpu_count() // max(1, _physical_cores()))
    return max(1, logical // per_core // processes)


def _physical_cores() -> int:
    """Distinct (package, core) pairs in /proc/cpuinfo; the logical count where it can't be read."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return os.cpu_count() or 1
    cores, package = set(), None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "physical id":
            package = value.strip()
        elif key.strip() == "core id":
            cores.add((package, value.strip()))
    return len(cores) or os.cpu_count() or 1


def use_threads(threads: int | None) -> int:
    """Make torch compute with ``threads`` CPU threads (None: `default_threads`); the count used."""
    import torch

    count = threads or default_threads()
    torch.set_num_threads(count)
    return count
