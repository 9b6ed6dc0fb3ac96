"""Several training processes on this machine: ``graphformer train --processes N``.

Each process runs this same command line with the variables torchrun would give it (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on the loopback), so the
training code cannot tell the two launchers apart. What this one changes is how a run ends:

* The processes live in their own process group, so a Ctrl-C on the terminal reaches only the
  launcher, which passes it on once to each of them (twice would abort them: see the trainer).
  SIGTERM and SIGHUP are passed on too; a signal the launcher ignores (``nohup``) stays ignored.
* A run that stops or fails ends with the processes' own lines and exit status, not with a
  launcher's traceback.
* Every step needs every process, so when one fails the others cannot go on: after a few
  seconds to report the same error themselves, they are killed (at once when the failed one was
  killed from outside: it said nothing, and the others may wait for it for ever). Checkpoints are
  written atomically, so nothing half-written stays behind.
* On Linux a process gets a SIGTERM when the launcher dies (`follow_launcher`), so a killed
  launcher does not leave its processes training on their own.

Several machines still need torchrun (docs/howto/scale.md).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

from graphformer.invocation import COMMAND, invoked_as

LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"
GRACE_SECONDS = 5.0  # after a failure, the others' time to exit by themselves before they are killed
POLL_SECONDS = 0.1
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LAUNCHER_PID = "GRAPHFORMER_LAUNCHER_PID"  # set in each process's environment
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
LOST_PEER_STATUS = 3  # a process's exit when a collective lost another process: that one is to blame


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now (for the processes to meet at)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_environment(rank: int, processes: int, port: int) -> dict:
    """What torchrun --standalone would set for process ``rank`` of ``processes`` on one machine."""
    env = {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(processes),
        "LOCAL_WORLD_SIZE": str(processes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        LAUNCHER_PID: str(os.getpid()),
        COMMAND: invoked_as(),  # each runs `python -m graphformer`; its hints name the command the user ran
    }
    env.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)  # gloo would look the host name up, which need not resolve
    return env


def follow_launcher() -> None:
    """In a process that `run_processes` started: ask Linux for a SIGTERM when the launcher dies
    (the trainer then stops after its step, with a checkpoint). Elsewhere, or in a process started
    otherwise, nothing."""
    launcher = os.environ.get(LAUNCHER_PID)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != int(launcher):  # it died before the request: act on it now
        os.kill(os.getpid(), signal.SIGTERM)


class Launch:
    """The processes of one run, and the signals passed on to them."""

    def __init__(self):
        self.ranks: list[subprocess.Popen] = []
        self.passed_on: set[int] = set()  # sent by this launcher: a process they end was not killed from outside

    def pass_on(self, sig: int) -> bool:
        """Send ``sig`` to every process still running; whether there was one."""
        self.passed_on.add(sig)
        running = [process for process in self.ranks if process.poll() is None]
        for process in running:
            process.send_signal(sig)
        return bool(running)

    def first_failure(self) -> int | None:
        """The rank to blame among those that have failed: one killed from outside first, then one
        with its own error, and one that only lost another (`LOST_PEER_STATUS`) last; the lowest
        rank among equals."""
        failed = [r for r, process in enumerate(self.ranks) if process.returncode not in (None, 0)]
        return min(
            failed,
            key=lambda r: (not self.killed_from_outside(r), self.ranks[r].returncode == LOST_PEER_STATUS, r),
            default=None,
        )

    def killed_from_outside(self, rank: int) -> bool:
        code = self.ranks[rank].returncode
        return code is not None and code < 0 and -code not in self.passed_on

    def wait(self, resume: str) -> int:
        """Wait for every process; the exit status of the one to blame (0 if none failed)."""
        failed, deadline, stopped = None, None, False
        while None in [process.poll() for process in self.ranks]:  # every process polled on every pass
            if failed is None and (failed := self.first_failure()) is not None:
                outside = self.killed_from_outside(failed)  # before this launcher sends any SIGKILL
                deadline = time.monotonic() + (0 if outside else GRACE_SECONDS)
            if deadline is not None and time.monotonic() >= deadline:
                stopped = self.pass_on(signal.SIGKILL) or stopped
            time.sleep(POLL_SECONDS)
        if failed is None and (failed := self.first_failure()) is not None:
            outside = self.killed_from_outside(failed)
        if failed is None:
            return 0
        code = self.ranks[failed].returncode
        if code >= 0:
            return code
        if outside:  # the out-of-memory killer, kill -9: the process said nothing
            others = "the other processes were stopped; " if stopped else ""
            sys.stderr.write(
                f"graphformer: process {failed} was killed by {signal.Signals(-code).name}; {others}"
                f"continue from the last checkpoint with: {resume}\n"
            )
        return 128 - code


def run_processes(argv: list[str], processes: int, resume: str) -> int:
    """Run ``graphformer argv`` as ``processes`` ranks and wait for them; returns the exit status
    of the first that failed (0 if none did). ``resume``: the command that continues the run, for
    a process that dies without a word (killed from outside)."""
    launch, port = Launch(), free_port()
    group = 0  # one process group for all: `kill -- -PGID` reaches every process
    # Installed first: a signal while the processes start reaches the ones started so far.
    previous = {
        sig: signal.signal(sig, lambda signum, frame: launch.pass_on(signum))
        for sig in PASSED_ON
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        for rank in range(processes):
            launch.ranks.append(
                subprocess.Popen(
                    [sys.executable, "-m", "graphformer", *argv],
                    process_group=group,
                    env=process_environment(rank, processes, port),
                )
            )
            group = launch.ranks[0].pid
        return launch.wait(resume)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for process in launch.ranks:  # left running only if starting or waiting raised: leave nothing behind
            if process.poll() is None:
                process.kill()
                process.wait()
