"""Associative recall: find the value stored under a key, thousands of tokens back.

A sample is a list of key-value pairs, then the query marker ``?`` and one of the keys; the
answer is the value paired with that key.

    source:  k17 v3 k4 v0 k250 v7 k9 v3 ? k250
    target:  v7

Keys ``k0 .. k{num_keys-1}`` and values ``v0 .. v{num_values-1}`` are disjoint token sets, the
keys of one sample are distinct (drawn without replacement), the values are drawn independently
and uniformly, and the queried pair is drawn uniformly among the pairs, so the answer is uniform
over the values (chance is 1 / num_values). A sample of L tokens holds (L - 2) / 2 pairs, so L is
even, at least 4 (one pair) and at most `MAX_LENGTH`. The vocabulary is exactly
`vocabulary(num_keys, num_values)`.

Why local attention cannot solve it: the answer sits right after the queried key, which is
anywhere in the context, on average L / 2 tokens before the query. With a window of w tokens on
each side, one layer moves information at most w positions, so after n layers the query has
heard of only the n * w tokens nearest to it. If the queried pair lies further back (for
L = 4096, w = 64 and 4 layers: about 15 pairs in 16), nothing about it reaches the query and the
model can only guess: accuracy cannot exceed about p + (1 - p) / num_values, with
p = n * w / (L - 2) the share of pairs within reach. A pattern with long reach (global tokens
that every token reads and writes, random links, a tree of spans, dilation) can carry the key
to the query in a few hops; full attention does it in one. Note that a classifier reading a
global `<cls>` node already has such reach, whatever pattern the tokens use.

From Python:

    >>> import random
    >>> from graphformer.data import recall
    >>> source, target = recall.generate_recall(1, random.Random(0), min_length=10, max_length=10)[0]
    >>> recall.write_recall("data/recall-1024", seed=1, min_length=1024, max_length=1024)
"""

from __future__ import annotations

import random
from pathlib import Path

from graphformer.data.splits import write_splits
from graphformer.errors import ConfigError

QUERY = "?"
SHORTEST = 4  # one pair, the query marker and the query key
MAX_LENGTH = 8192  # the longest context the long-range experiments use
DEFAULT_LENGTH = 1024  # the default for both min_length and max_length
DEFAULT_NUM_VALUES = 10  # chance is 10 %, as in ListOps
SPLITS = {"train": 2000, "valid": 200, "test": 200}


def pairs_in(length: int) -> int:
    """Key-value pairs in a sample of ``length`` tokens."""
    return (length - 2) // 2


def vocabulary(num_keys: int, num_values: int) -> tuple[str, ...]:
    """Every token a sample may hold: the keys, the values and the query marker."""
    return tuple(f"k{i}" for i in range(num_keys)) + tuple(f"v{i}" for i in range(num_values)) + (QUERY,)


def check_options(min_length: int, max_length: int, num_keys: int | None, num_values: int) -> None:
    """Refuse options that cannot give a sample, naming the option at fault."""
    for name, value in (
        ("min_length", min_length),
        ("max_length", max_length),
        ("num_keys", num_keys),
        ("num_values", num_values),
    ):
        if name == "num_keys" and value is None:
            continue  # the default, worked out from max_length
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(name, f"must be a whole number, not {value!r}")
    for name, value in (("min_length", min_length), ("max_length", max_length)):
        if value < SHORTEST:
            raise ConfigError(name, f"must be at least {SHORTEST} (one key-value pair, `?` and the key), not {value}")
        if value % 2:
            raise ConfigError(name, f"must be even (pairs of 2 tokens, then `?` and the key), not {value}")
    if min_length > max_length:
        raise ConfigError("min_length", f"({min_length}) must not exceed max_length ({max_length})")
    if max_length > MAX_LENGTH:
        raise ConfigError("max_length", f"must be at most {MAX_LENGTH}, not {max_length}")
    if num_values < 2:
        raise ConfigError("num_values", f"must be at least 2 for the answer to carry information, not {num_values}")
    if num_keys is not None and num_keys < pairs_in(max_length):
        raise ConfigError(
            "num_keys",
            f"must be at least {pairs_in(max_length)}, the pairs in a sample of "
            f"max_length={max_length} tokens (keys are distinct), not {num_keys}",
        )


def generate_recall(
    n: int,
    rng: random.Random,
    min_length: int = DEFAULT_LENGTH,
    max_length: int = DEFAULT_LENGTH,
    num_keys: int | None = None,
    num_values: int = DEFAULT_NUM_VALUES,
) -> list[tuple[str, str]]:
    """``n`` (context and query, value) pairs of ``min_length`` to ``max_length`` tokens.

    ``num_keys`` defaults to the pairs in a sample of ``max_length`` tokens, the fewest that keep
    keys distinct; lengths are drawn uniformly among the even numbers in the range.
    """
    check_options(min_length, max_length, num_keys, num_values)
    num_keys = pairs_in(max_length) if num_keys is None else num_keys
    keys = [f"k{i}" for i in range(num_keys)]
    values = [f"v{i}" for i in range(num_values)]
    samples = []
    for _ in range(n):
        pairs = pairs_in(2 * rng.randint(min_length // 2, max_length // 2))
        drawn_keys = rng.sample(keys, pairs)
        drawn_values = rng.choices(values, k=pairs)
        queried = rng.randrange(pairs)
        tokens = [token for pair in zip(drawn_keys, drawn_values) for token in pair]
        tokens += [QUERY, drawn_keys[queried]]
        samples.append((" ".join(tokens), drawn_values[queried]))
    return samples


def write_recall(
    data_dir: str | Path,
    seed: int = 1,
    sizes: dict[str, int] = SPLITS,
    min_length: int = DEFAULT_LENGTH,
    max_length: int = DEFAULT_LENGTH,
    num_keys: int | None = None,
    num_values: int = DEFAULT_NUM_VALUES,
) -> Path:
    """Generate recall splits into ``data_dir``: ``{split}.src`` contexts, ``{split}.tgt`` values.

    Files already there are left untouched; see `graphformer.data.splits.write_splits`.
    """
    check_options(min_length, max_length, num_keys, num_values)  # before any folder is made
    rng = random.Random(f"recall-{seed}")
    return write_splits(
        data_dir,
        sizes,
        lambda split, n: generate_recall(n, rng, min_length, max_length, num_keys, num_values),
        "recall",
        seed,
    )
