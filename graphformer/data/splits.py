"""Write a generated task's train / valid / test splits as aligned text files.

A generated task is a function ``draw(split, n) -> [(source, target), ...]`` that takes its randomness
from one `random.Random`. The splits are drawn in the order of ``sizes`` from that one stream, so
the same seed gives the same files. The layout is the one every parallel data set uses:

    data_dir/train.src   one input a line, tokens separated by spaces
    data_dir/train.tgt   the expected output on the same line number
    data_dir/valid.src ...

Files already there are left untouched (evaluation and resumed runs call the writer every time),
and each file is written atomically: complete or absent, never half-written. ``data_dir/generated.json``
records which task made them (and the options that shape the samples, such as their lengths), so a
folder of one task's data is never read as another's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from graphformer.data.text import write_lines_atomic
from graphformer.errors import ConfigError, UserError
from graphformer.files import write_text_atomic

Draw = Callable[[str, int], list[tuple[str, str]]]


def check_sizes(sizes: dict[str, int]) -> None:
    """Refuse split sizes that are not whole numbers of at least 1."""
    if not isinstance(sizes, dict):
        raise ConfigError(
            "sizes", f"must map split names to sizes, e.g. {{'train': 2000, 'valid': 200}}, not {sizes!r}"
        )
    for split, n in sizes.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError("sizes", f"[{split!r}] must be a whole number of at least 1, not {n!r}")


RECORD = "generated.json"


def write_splits(
    data_dir: str | Path, sizes: dict[str, int], draw: Draw, task: str, seed: int, options: dict | None = None
) -> Path:
    """Draw ``sizes[split]`` pairs for each split and write ``{split}.src`` / ``{split}.tgt``.

    Args:
        data_dir: the folder to write into (created if missing).
        sizes: split name -> number of pairs, e.g. ``{"train": 2000, "valid": 200, "test": 200}``.
        draw: ``draw(split, n)`` returns ``n`` (source, target) pairs of whitespace-separated tokens.
        task: the generated task's name, recorded in ``data_dir/generated.json`` with the seed;
            a folder that another task generated is refused.
        seed: the seed ``draw`` was made with (recorded for the reader).
        options: what else shapes the samples (JSON values), recorded with the task; a folder
            generated with other options is refused.

    Returns:
        ``data_dir`` as a `Path`.
    """
    check_sizes(sizes)
    data_dir = Path(data_dir)
    options = options or {}
    _check_same_task(data_dir, task, options)
    if all((data_dir / f"{split}.{side}").exists() for split in sizes for side in ("src", "tgt")):
        return data_dir  # nothing to draw
    data_dir.mkdir(parents=True, exist_ok=True)
    if not (data_dir / RECORD).exists():
        write_text_atomic(data_dir / RECORD, json.dumps({"task": task, "seed": seed, **options}) + "\n")
    for split, n in sizes.items():
        pairs = draw(split, n)  # drawn even when the split's files exist, so later splits stay reproducible
        for side, lines in (("src", [p[0] for p in pairs]), ("tgt", [p[1] for p in pairs])):
            path = data_dir / f"{split}.{side}"
            if not path.exists():
                write_lines_atomic(path, lines)
    return data_dir


def generated_by(data_dir: str | Path) -> dict | None:
    """The record of what generated the data in ``data_dir`` ({"task": ..., "seed": ...}), or
    None where there is none (a folder made before records were kept, or by hand)."""
    try:
        record = json.loads((Path(data_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _check_same_task(data_dir: Path, task: str, options: dict) -> None:
    record = generated_by(data_dir)
    if record is None:
        return  # nothing to compare
    made_by = record.get("task")
    if made_by != task:
        raise UserError(
            f"{data_dir} holds data generated for task {made_by!r}, not {task!r}; give another "
            "--data-dir (or none: RUN_DIR/data)"
        )
    for name in sorted(set(options) | set(record) - {"task", "seed"}):
        if record.get(name) != options.get(name):
            raise UserError(
                f"{data_dir} holds {task} data generated with {name} {record.get(name)!r}, not "
                f"{options.get(name)!r}; give another --data-dir (or none: RUN_DIR/data)"
            )
