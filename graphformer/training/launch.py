"""Several training processes on this machine: ``graphformer train --processes N``.

Each process runs this same command line with the variables torchrun would give it (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on the loopback), so the
training code cannot tell the two launchers apart. What this one changes is how a run ends:

* The processes live in their own process group, so a Ctrl-C on the terminal reaches only the
  launcher, which passes it on once to each of them (twice would abort them: see the trainer).
  SIGTERM is passed on too, and a hang-up as a SIGTERM, so that each stops with a checkpoint.
* A run that stops or fails ends with the processes' own lines and exit status, not with a
  launcher's traceback.
* Every step needs every process, so when one fails the others cannot go on: after a few
  seconds to report the same error themselves, they are killed (their checkpoints are written
  atomically: nothing half-written stays behind).

Several machines still need torchrun (docs/howto/scale.md).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"
GRACE_SECONDS = 5.0  # after a failure, the others' time to exit by themselves before they are killed
POLL_SECONDS = 0.1
PASSED_ON = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now (for the processes to meet at)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_environment(rank: int, processes: int, port: int) -> dict:
    """What torchrun --standalone would set for process ``rank`` of ``processes`` on one machine."""
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(processes),
           "LOCAL_WORLD_SIZE": str(processes), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    env.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)  # gloo would look the host name up, which need not resolve
    return env


def run_processes(argv: list[str], processes: int, resume: str) -> int:
    """Run ``graphformer argv`` as ``processes`` ranks and wait for them; returns the exit status
    of the first that failed (0 if none did). ``resume``: the command that continues the run, for
    a process that dies without a word (killed by a signal)."""
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, "-m", "graphformer", *argv], process_group=0,
                              env=process_environment(rank, processes, port)) for rank in range(processes)]
    previous = {sig: signal.signal(sig, lambda signum, frame: _pass_on(ranks, PASSED_ON[signum]))
                for sig in PASSED_ON}
    try:
        return _wait(ranks, resume)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for process in ranks:  # only if waiting itself was cut short (a second error): leave nothing running
            if process.poll() is None:
                process.kill()
                process.wait()


def _pass_on(ranks: list[subprocess.Popen], sig: int) -> None:
    for process in ranks:
        if process.poll() is None:
            process.send_signal(sig)


def _first_failure(ranks: list[subprocess.Popen]) -> int | None:
    """The rank to blame among those that have failed: one killed by a signal first (the others'
    errors, a lost connection, follow from it), else the lowest."""
    failed = [r for r, process in enumerate(ranks) if process.returncode not in (None, 0)]
    return min(failed, key=lambda r: (ranks[r].returncode >= 0, r), default=None)


def _wait(ranks: list[subprocess.Popen], resume: str) -> int:
    failed, deadline = None, None  # the first process that failed, and when the others are killed
    while any(process.poll() is None for process in ranks):
        if failed is None:
            failed = _first_failure(ranks)
            if failed is not None:
                # Killed by a signal, it said nothing and the others are stuck without it: stop them now.
                deadline = time.monotonic() + (0 if ranks[failed].returncode < 0 else GRACE_SECONDS)
        if deadline is not None and time.monotonic() >= deadline:
            _pass_on(ranks, signal.SIGKILL)
        time.sleep(POLL_SECONDS)
    if failed is None:
        failed = _first_failure(ranks)
    if failed is None:
        return 0
    code = ranks[failed].returncode
    if code < 0:  # a signal that did not come through this launcher (the out-of-memory killer, kill -9)
        name = signal.Signals(-code).name
        sys.stderr.write(f"graphformer: process {failed} was killed by {name}; the other processes were stopped; "
                         f"continue from the last checkpoint with: {resume}\n")
        return 128 - code
    return code
