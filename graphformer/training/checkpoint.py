"""Checkpoints: written atomically, read with clear errors.

A checkpoint is one ``torch.save`` file holding only tensors and plain Python values (so it
loads with ``weights_only=True``): model and optimizer state, the schedule, RNG states,
vocabularies, configs and progress counters.

Every checkpoint records the version of its format (``"format": "graphformer-checkpoint-N"``,
N = `VERSION`); this graphformer reads its own version only, and another is a one-line error
that names both. Raise `VERSION` when a change to what a checkpoint holds would make an older
graphformer misread it; a change that older readers pass over (a new key, a key no longer
written) keeps it. Every graphformer checkpoint has had the field: a file without it is none.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from graphformer import __version__
from graphformer.errors import UserError
from graphformer.files import write_atomic

VERSION = 1
FORMAT = f"graphformer-checkpoint-{VERSION}"
LAST, BEST, AVERAGED = "checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_averaged.pt"
CONFIG = "config.json"  # every run directory has one (`graphformer.training.run_dir`)


def save_atomic(state: dict, path: str | Path) -> None:
    """Write a checkpoint so that a crash at any moment leaves the old file or the new one."""
    write_atomic(path, lambda f: torch.save({"format": FORMAT, **state}, f))


def load(path: str | Path, advice: str = "use the other checkpoint or retrain") -> dict:
    """A checkpoint (or any file written by `save_atomic`); a damaged one is a `UserError` that
    names it and ends with ``advice``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train a model first (graphformer train --out DIR)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's own text (unpickler internals, an unsafe retry) is not ours to pass on
        raise UserError(f"{path} is not a checkpoint, or a damaged one; {advice}") from None
    except Exception as err:  # anything else unreadable: a few bytes of text alone can raise KeyError
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        reason = reason if isinstance(err, (RuntimeError, EOFError, ValueError, OSError)) else type(err).__name__
        raise UserError(f"{path} is damaged or truncated ({reason}); {advice}") from None
    version = format_version(state)
    if version is None:
        raise UserError(f"{path} is not a graphformer checkpoint")
    if version != VERSION:
        which = (
            "a newer graphformer wrote it: upgrade"
            if version > VERSION
            else "an older graphformer wrote it: use that version, or retrain"
        )
        raise UserError(
            f"{path} is a checkpoint of format version {version}, and this graphformer ({__version__}) "
            f"reads version {VERSION}; {which}"
        )
    return state


def format_version(state) -> int | None:
    """The format version a loaded checkpoint records, or None if it is no graphformer checkpoint."""
    fmt = state.get("format") if isinstance(state, dict) else None
    match = re.fullmatch(r"graphformer-checkpoint-(\d+)", fmt) if isinstance(fmt, str) else None
    return int(match.group(1)) if match else None


def check_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a Path, if it is a folder; else a UserError that says what it is."""
    run_dir = Path(run_dir)
    if run_dir.is_dir():
        return run_dir
    what = "is a file, not a run directory" if run_dir.exists() else "does not exist"
    raise UserError(f"run directory {run_dir} {what}; give the --out directory of a training run")


def is_average(path: Path) -> bool:
    """Whether ``path`` holds weights that ``graphformer average`` wrote."""
    try:
        return "averaged_from" in load(path)
    except UserError:
        return False


def find(run_dir: str | Path, which: str = "best") -> Path:
    """The run's ``best`` (or ``last``) checkpoint, falling back to the other one; ``averaged``
    (written by ``graphformer average``); or the path of a checkpoint file."""
    run_dir = check_run_dir(run_dir)
    if which not in ("best", "last"):
        path = run_dir / AVERAGED if which == "averaged" else Path(which)
        if path.is_dir():
            raise UserError(f"checkpoint {path} is a folder; give best, last, averaged or a checkpoint file")
        if not path.is_file():
            hint = "write it with graphformer average" if which == "averaged" else "give best, last, averaged or a file"
            raise UserError(f"checkpoint {path} does not exist; {hint}")
        return path
    order = (BEST, LAST) if which == "best" else (LAST, BEST)
    for name in order:
        if (run_dir / name).is_file():
            return run_dir / name
    if not (run_dir / CONFIG).is_file():  # not a run at all (a run's data folder, say)
        raise UserError(
            f"{run_dir} is not a run directory (it has no {CONFIG}); give the --out directory of a training run"
        )
    raise UserError(f"no checkpoint in {run_dir}; train first with graphformer train --out {run_dir}")
