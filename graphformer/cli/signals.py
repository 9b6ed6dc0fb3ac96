"""Ctrl-C in the ``graphformer`` command: held until a step boundary while drawing or writing,
and a second one in training ends the process at once."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from contextlib import contextmanager

from graphformer.cli.errors import say


@contextmanager
def interrupts_between_steps():
    """Within the block Ctrl-C is held until the next ``check()``, which raises it.

    Drawing makes and drops many matplotlib objects, whose weak-reference callbacks run at any
    moment; a KeyboardInterrupt raised inside one is printed as "Exception ignored" and lost, so
    the command would go on. Raised at a step boundary instead, it ends the command cleanly.
    Where Ctrl-C does not raise KeyboardInterrupt (SIGINT ignored or handled by someone else, or
    a thread other than the main one, which cannot set handlers) nothing changes.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield lambda: None
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))

    def check():
        if pending:
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
    check()  # a Ctrl-C during the block's last step


def abort_training() -> None:
    """A second Ctrl-C in training: one line, and exit 130 at once. A KeyboardInterrupt could land
    anywhere, inside torch.save (whose zip writer then raises an error of its own) or in an exit
    hook, and end in a traceback. Ending without clean-up loses nothing: files are written to a
    temporary and renamed (`graphformer.files`), and the next run removes a temporary left behind."""
    try:
        sys.stdout.flush()
        say("interrupted")
    finally:
        os._exit(130)


def abort_on_ctrl_c_at_exit() -> None:
    """Training stopped for a Ctrl-C and gave the signal back; another one is the second still, and
    may land in an exit hook (torch has some): there too it must be `abort_training`. Set when the
    interpreter exits, not now, since main() also runs inside other programs (the tests). Exit hooks
    run last registered first, so this one runs before torch's."""
    atexit.unregister(_ctrl_c_aborts)  # one is enough, however many runs this process stopped
    atexit.register(_ctrl_c_aborts)


def _ctrl_c_aborts() -> None:
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # an ignored Ctrl-C stays ignored
        signal.signal(signal.SIGINT, lambda signum, frame: abort_training())
