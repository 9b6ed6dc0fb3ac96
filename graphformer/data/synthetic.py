"""Synthetic sequence tasks, generated reproducibly from a seed.

    copy:  h e l l o  ->  h e l l o
    sort:  h e l l o  ->  e h l l o

Letters a-z; lengths drawn from N(15, 3), rounded and clipped to at least 1; 9000 / 1000 / 1000
train / valid / test sentences. The files are whitespace-separated letters, one sentence a line,
in the same layout as any parallel data set (``train.src``, ``train.tgt``, ...).
"""
from __future__ import annotations

import random
import string
from pathlib import Path

from graphformer.data.splits import write_splits

NAMES = ("copy", "sort")
SPLITS = {"train": 9000, "valid": 1000, "test": 1000}


def generate_pairs(task: str, n: int, rng: random.Random) -> list[tuple[str, str]]:
    if task not in NAMES:
        raise ValueError(f"unknown synthetic task {task!r}; choose one of {NAMES}")
    pairs = []
    for _ in range(n):
        length = max(1, round(rng.gauss(15, 3)))
        letters = [rng.choice(string.ascii_lowercase) for _ in range(length)]
        target = sorted(letters) if task == "sort" else letters
        pairs.append((" ".join(letters), " ".join(target)))
    return pairs


def write_task(task: str, data_dir: str | Path, seed: int = 1, sizes: dict[str, int] = SPLITS) -> Path:
    """Generate the task's splits into ``data_dir`` (files already there are left untouched)."""
    rng = random.Random(f"{task}-{seed}")
    return write_splits(data_dir, sizes, lambda n: generate_pairs(task, n, rng), task, seed)
