"""Files that are either complete or absent: every file graphformer writes goes through here.

A writer fills ``.NAME.tmp-PID`` beside the target, flushes it to disk and renames it over the
target; a crash at any moment leaves the old file or the new one, never half of one. A crash
during the write can leave the temporary file behind: ``remove_temporaries`` clears them when a
run directory is opened again.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Callable

TMP_MARK = ".tmp-"


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a temporary file, then move it to ``path`` in one step."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
