"""Files that are either complete or absent: every file graphformer writes goes through here.

A writer fills ``.NAME.tmp-PID`` beside the target, flushes it to disk and renames it over the
target; a crash at any moment leaves the old file or the new one, never half of one. A crash
during the write can leave the temporary file behind: ``remove_temporaries`` clears them when a
run directory is opened again.

A write the system refuses (a full disk, the file-size limit, a read-only folder) is a
`WriteRefused`: one line that names the file graphformer meant to write and why it could not.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

from graphformer.errors import UserError

TMP_MARK = ".tmp-"

# errno of a refused write -> (what happened, what the user can do about it)
REFUSED = {
    errno.ENOSPC: ("the disk is full", "free some space"),
    errno.EDQUOT: ("the disk quota is used up", "free some space"),
    errno.EFBIG: ("the file is too large for this system's file-size limit", "raise the limit (ulimit -f)"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
    errno.EACCES: ("permission denied", "give yourself write permission"),
    errno.EPERM: ("permission denied", "give yourself write permission"),
}


class WriteRefused(UserError):
    """The system refused to write ``path`` (`REFUSED` says why); every file written before is
    whole. ``then`` says how to go on once the cause is fixed."""

    def __init__(self, path: str | Path, error: OSError, then: str = "then run the command again"):
        what, remedy = REFUSED[error.errno]
        said = error.strerror or str(error)
        detail = "" if said.lower() == what else f" ({said})"  # the system's words, where they say more
        super().__init__(f"cannot write {path}: {what}{detail}; {remedy}, {then}")
        self.path, self.error = Path(path), error


def refused_write(err: BaseException | None) -> OSError | None:
    """The refused write (an OSError of `REFUSED`) in ``err`` or the errors it arose from, else
    None: torch.save reports a failed write as a RuntimeError of its own, raised while handling it."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in REFUSED:
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a temporary file, then move it to ``path`` in one step; a refused
    write is a `WriteRefused` naming ``path`` (the old file, if any, stays as it was)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as err:
        refused = refused_write(err)
        if refused is None:
            raise
        raise WriteRefused(path, refused) from None
    finally:
        with suppress(OSError):  # a read-only folder refuses this too: the write's error is the one to report
            tmp.unlink(missing_ok=True)


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to a text file; a refused write is a `WriteRefused`, and can
    leave part of the line (readers of a log drop a torn last line)."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as err:
        if err.errno not in REFUSED:
            raise
        raise WriteRefused(path, err) from None


def write_text_atomic(path: str | Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_json_atomic(path: str | Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


def remove_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporary files that interrupted writes left in ``folder``; returns them."""
    left = [p for p in Path(folder).glob(f".*{TMP_MARK}*") if p.is_file()]
    for p in left:
        p.unlink(missing_ok=True)
    return left


def epoch_file(folder: Path, epoch: int) -> Path:
    """``folder/epoch_NNNN.pt``: a file of one epoch (a kept checkpoint, recorded attention maps)."""
    return Path(folder) / f"epoch_{epoch:04d}.pt"


def epoch_of(path: Path) -> int:
    """The epoch an `epoch_file` is of."""
    return int(Path(path).stem.split("_")[1])


def epoch_files(folder: Path) -> list[Path]:
    """The `epoch_file` files in ``folder``, oldest epoch first (by number: epoch_10000 comes after
    epoch_9999, which its name sorts before); other files (``epoch_3 copy.pt``) are not listed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("epoch_*.pt") if re.fullmatch(r"epoch_\d+\.pt", p.name)), key=epoch_of)
