"""CPU threads: how many torch computes with, and how they wait for each other.

torch's pip wheels run their CPU kernels on GNU OpenMP (libgomp). A thread that has done its share
of a parallel region waits for the next one by spinning ``GOMP_SPINCOUNT`` times (300,000 unless
told) before it sleeps. On cores of its own that saves a wake-up; on cores shared with other busy
processes it burns the time slice that the thread it waits for needs, and every region waits for
the slowest, descheduled thread: the copy demo's 2-thread training fell to a small fraction of its
speed beside other work, while waiting passively (sleeping at once) kept it level with or above
1 thread there (docs/results.md, "Training on shared cores"). So the defaults are:

* wait policy: ``OMP_WAIT_POLICY=passive`` unless the environment sets ``OMP_WAIT_POLICY`` or
  ``GOMP_SPINCOUNT`` itself. libgomp reads it once, when torch loads it: `wait_passively` is called
  by the ``graphformer`` command before any command imports torch (in a Python session, set the
  variable before ``import torch``).
* thread count: ``--threads N``, else ``OMP_NUM_THREADS`` for one process, else the physical cores
  this process may use, shared among the run's processes on this machine (`default_threads`).

This module imports torch only inside `use_threads`, so the command can call `wait_passively` first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

# The environment variables by which a user chooses how libgomp's threads wait: either one set
# means the choice is theirs.
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
WAIT_POLICY = "passive"


def wait_passively(environ: MutableMapping[str, str], torch_loaded: bool) -> bool:
    """Set ``OMP_WAIT_POLICY=passive`` in ``environ`` unless a wait setting is there already or
    torch (with its libgomp) is loaded, when it would no longer be read. Processes started from
    this one inherit it. Returns whether it was set."""
    if torch_loaded or any(name in environ for name in WAIT_SETTINGS):
        return False
    environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    return True


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
