"""Synthetic sequence tasks, generated reproducibly from a seed.

    copy:      h e l l o        ->  h e l l o
    sort:      h e l l o        ->  e h l l o
    reverse:   h e l l o        ->  o l l e h
    addition:  9 1 + 3 5        ->  2 7          (19 + 53 = 72, digits least significant first)

copy, sort and reverse use the letters a-z; addition writes two numbers in decimal digits, least
significant digit first, separated by ``+``, and the target is their sum in the same order without
leading zeros (the Neural GPU's and the Universal Transformer paper's lower-endian layout: the
carry travels the same way as the reading). 9000 / 1000 / 1000 train / valid / test samples.

Lengths (of the source line, ``+`` included) are drawn from N(15, 3), rounded and clipped to the
shortest a task allows (1, or 3 for addition), unless ``lengths`` gives each split its own range:
``{"train": (1, 40), "valid": (400, 400), "test": (400, 400)}`` is the length-generalisation
setup of Dehghani et al. (2019): train on lengths up to 40, choose and test at 400. Lengths in a
range are drawn uniformly. A split that ``lengths`` leaves out uses the default distribution.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from graphformer.data.splits import write_splits
from graphformer.errors import ConfigError

NAMES = ("copy", "sort", "reverse", "addition")
SPLITS = {"train": 9000, "valid": 1000, "test": 1000}
Lengths = dict[str, tuple[int, int]]


def shortest(task: str) -> int:
    """The shortest source line of a task: two one-digit numbers and the ``+`` for addition."""
    return 3 if task == "addition" else 1


def parse_lengths(text: str, task: str, option: str) -> tuple[int, int]:
    """``"1-40"`` -> (1, 40), ``"400"`` -> (400, 400), refused with the option's name if malformed."""
    parts = text.split("-")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(option, f"must be a length or a range LOW-HIGH of lengths, e.g. 1-40 or 400, not {text!r}")
    low, high = int(parts[0]), int(parts[-1])
    if not shortest(task) <= low <= high:
        raise ConfigError(
            option, f"must be a range LOW-HIGH with {shortest(task)} <= LOW <= HIGH for task {task}, not {text!r}"
        )
    return low, high


def split_lengths(task: str, train: str | None, test: str | None) -> Lengths | None:
    """The ``lengths`` of `write_task` from the options ``train_lengths`` and ``test_lengths``
    (ranges as `parse_lengths` reads them): valid and test take ``test``, else ``train``; None
    when neither is given (the default distribution)."""
    if not (train or test):
        return None
    lengths = {"train": parse_lengths(train, task, "train_lengths")} if train else {}
    held_out = parse_lengths(test, task, "test_lengths") if test else lengths.get("train")
    return lengths | ({"valid": held_out, "test": held_out} if held_out else {})


def draw_length(task: str, rng: random.Random, span: tuple[int, int] | None) -> int:
    if span is None:
        return max(shortest(task), round(rng.gauss(15, 3)))
    return rng.randint(*span)


def addition_pair(length: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """Two numbers of ``length - 1`` digits in all (each at least one), least significant first,
    and their sum."""
    first = rng.randint(1, length - 2)
    digits = [rng.choice(string.digits) for _ in range(length - 1)]
    a, b = digits[:first], digits[first:]
    total = int("".join(reversed(a))) + int("".join(reversed(b)))
    return [*a, "+", *b], list(reversed(str(total)))


def generate_pairs(task: str, n: int, rng: random.Random, span: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """``n`` (source, target) lines of ``task``, lengths from ``span`` (see the module docstring)."""
    if task not in NAMES:
        raise ValueError(f"unknown synthetic task {task!r}; choose one of {NAMES}")
    pairs = []
    for _ in range(n):
        length = draw_length(task, rng, span)
        if task == "addition":
            source, target = addition_pair(length, rng)
        else:
            source = [rng.choice(string.ascii_lowercase) for _ in range(length)]
            target = {"copy": source, "sort": sorted(source), "reverse": source[::-1]}[task]
        pairs.append((" ".join(source), " ".join(target)))
    return pairs


def write_task(
    task: str, data_dir: str | Path, seed: int = 1, sizes: dict[str, int] = SPLITS, lengths: Lengths | None = None
) -> Path:
    """Generate the task's splits into ``data_dir`` (files already there are left untouched; a
    folder generated with other ``lengths`` is refused)."""
    rng = random.Random(f"{task}-{seed}")
    lengths = lengths or {}

    def draw(split: str, n: int):
        return generate_pairs(task, n, rng, lengths.get(split))

    options = {"lengths": {split: list(span) for split, span in lengths.items()}} if lengths else {}
    return write_splits(data_dir, sizes, draw, task, seed, options)
