"""Ctrl-C and SIGTERM while a run trains: the first asks for a stop after the current step, with
a checkpoint; a second Ctrl-C aborts at once (the last checkpoint stays).

A repeated SIGTERM only asks again: a scheduler may send one to every process of a job, and the
launcher of several processes passes its own copy on. Every rank installs the handler, since a
signal that reaches any of them stops all at one step (`Trainer` checks `requested` on every rank).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import contextmanager

from tqdm.auto import tqdm

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_keyboard_interrupt() -> None:
    """The default abort: the caller (a notebook, say) handles KeyboardInterrupt."""
    raise KeyboardInterrupt


class StopRequest:
    """The signal handler of a training run, and what it was asked. ``abort``: what a second
    Ctrl-C does; ``announce``: say on the console that a stop is coming (the main process)."""

    def __init__(self, abort: Callable[[], None] = raise_keyboard_interrupt, announce: bool = True):
        self.abort = abort
        self.announce = announce
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT:  # a second Ctrl-C: stop now
            self.abort()
            return
        self.requested = True
        if self.announce:
            tqdm.write("interrupt: finishing this step and writing a checkpoint (Ctrl-C again to abort)")

    @contextmanager
    def installed(self):
        """This handler for SIGINT and SIGTERM while the block runs, the previous ones after. A
        signal ignored on entry stays ignored, as the launcher leaves it: a shell starts a
        script's background job (cmd &) with SIGINT ignored, so that a Ctrl-C at the terminal
        spares it."""
        previous = {sig: signal.signal(sig, self) for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
