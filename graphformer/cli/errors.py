"""How the ``graphformer`` command reports what stopped it: one line on stderr and an exit status.

Errors a user can fix (`graphformer.errors.UserError`), files the system refused, running out
of memory and a lost peer process are printed as one line (``graphformer: error: ...``) with exit
status 2 (a lost peer: `graphformer.training.launch.LOST_PEER_STATUS`); anything else is a bug
and keeps its traceback. Set GRAPHFORMER_DEBUG=1 to see the traceback of a user error too.
"""

from __future__ import annotations

import errno
import os
import sys

from graphformer.cli.parser import flag
from graphformer.errors import ConfigError, UserError

# How a failed allocation reads in the errors of torch (CPU, CUDA, cuBLAS) and DGL, which raise
# RuntimeError or DGLError rather than MemoryError.
OUT_OF_MEMORY = (
    "can't allocate memory",
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "bad_alloc",
    "Cannot allocate memory",
)


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: Python's, torch's or DGL's, on the CPU or a GPU."""
    return (
        isinstance(err, MemoryError)
        or type(err).__name__ == "OutOfMemoryError"
        or any(text in str(err) for text in OUT_OF_MEMORY)
    )


# How a collective reads when another process of the run has gone: gloo's socket errors, NCCL's.
LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "remote process exited")


def _lost_peer(err: BaseException) -> bool:
    """Whether ``err``, in one of several processes, is a collective that failed because another
    process of the run exited."""
    return "WORLD_SIZE" in os.environ and isinstance(err, RuntimeError) and any(t in str(err) for t in LOST_PEER)


def say(text: str) -> None:
    """``graphformer: text`` on stderr in one write: a run's processes share the stream, and a line
    written in pieces could run into another process's. With several processes each reports its
    own error (it may be that one's alone); the ones past the first say their rank."""
    rank = os.environ.get("RANK", "0")
    sys.stderr.write(f"graphformer{'' if rank == '0' else f' (rank {rank})'}: {text}\n")
    sys.stderr.flush()


def _debugging() -> bool:
    return bool(os.environ.get("GRAPHFORMER_DEBUG"))


def report(err: BaseException) -> int | None:
    """Say what ``err`` means to a user and return the exit status; None for an error that is a
    bug (or any error while debugging), which the caller raises again."""
    if isinstance(err, KeyboardInterrupt):
        say("interrupted")
        return 130
    if isinstance(err, BrokenPipeError):  # the reader of stdout left (| head): stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if _debugging() or not isinstance(err, Exception):
        return None
    if isinstance(err, UserError):
        say("error: " + (f"{flag(err.name)} {err.problem}" if isinstance(err, ConfigError) else str(err)))
        return 2
    if isinstance(err, OSError):  # a file or folder the system refused: read-only, no permission, not a folder
        say(f"error: {_refused(err)}")
        return 2
    if _lost_peer(err):
        from graphformer.training.launch import LOST_PEER_STATUS

        say(f"error: another process of this run stopped, and this one cannot go on without it ({err})")
        return LOST_PEER_STATUS
    if _out_of_memory(err):  # MemoryError, or torch's and DGL's allocation failures
        say(
            "error: out of memory; ask for less at once (a smaller --beam, --batch-size or --batch-tokens, a shorter "
            "--max-len, a smaller model)"
        )
        return 2
    return None


def _refused(err: OSError) -> str:
    """What the system refused, and what to do about it."""
    from graphformer.files import REFUSED

    where = f"{err.filename}: " if err.filename else ""
    if err.errno in REFUSED and err.errno not in (errno.EACCES, errno.EPERM):  # only ever a write's
        what, remedy = REFUSED[err.errno]
        return f"{where}{what} ({err.strerror or err}); {remedy}, then run the command again"
    return f"{where}{err.strerror or err}; check the path and its permissions"
