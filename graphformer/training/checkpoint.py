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
from graphformer.choices import DEFAULT_BACKEND
from graphformer.errors import UserError
from graphformer.files import write_atomic
from graphformer.invocation import invoked_as
from graphformer.model import ModelConfig, build_model
from graphformer.vocab import Vocab

VERSION = 1
FORMAT = f"graphformer-checkpoint-{VERSION}"


def save_atomic(state: dict, path: str | Path) -> None:
    """Write a checkpoint so that a crash at any moment leaves the old file or the new one."""
    write_atomic(path, lambda f: torch.save({"format": FORMAT, **state}, f))


def load(path: str | Path, advice: str = "use the other checkpoint or retrain") -> dict:
    """A checkpoint (or any file written by `save_atomic`); a damaged one is a `UserError` that
    names it and ends with ``advice``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train a model first ({invoked_as()} train --out DIR)")
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


def is_average(path: Path) -> bool:
    """Whether ``path`` holds weights that ``graphformer average`` wrote."""
    try:
        return "averaged_from" in load(path)
    except UserError:
        return False


def checkpoint_vocabs(state: dict) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies a checkpoint was trained with."""
    return Vocab(state["vocab"]["src"]), Vocab(state["vocab"]["tgt"])


def load_model(state: dict, path: Path, attention_backend: str = DEFAULT_BACKEND):
    """The model a checkpoint (read from ``path``) holds, on the CPU, with ``attention_backend``."""
    model = build_model(ModelConfig.from_dict(state["model_config"]), attention_backend)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:
        raise UserError(f"{path} holds weights of another model shape than its config; retrain") from None
    return model
