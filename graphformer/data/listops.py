"""ListOps: evaluate a long nested list expression to one digit (Long Range Arena's ListOps).

ListOps (Nangia & Bowman, 2018), at the lengths Long Range Arena uses (Tay et al., 2020): a
prefix expression over the digits 0-9 with four operators, each opened by its name and closed by
``]``. The answer is the expression's value, one digit.

    source:  [MAX 2 9 [MIN 4 7 ] 0 ]
    target:  9

The operators, applied to their arguments x_1 .. x_k (2 <= k <= max_args):

    [MAX   max x_i
    [MIN   min x_i
    [MED   the median, as LRA computes it (int(np.median(x))): the middle value of the sorted
           arguments for odd k, and for even k the mean of the two middle values rounded down,
           so [MED 1 2 ] = 1 and [MED 1 4 ] = 2
    [SM    (sum x_i) mod 10

The vocabulary is exactly `VOCABULARY`: the four operators, ``]`` and the ten digits.

Shape of the trees: see `graphformer.data.expressions` (the length comes first, then each
operator splits its budget). As in LRA, the root is at depth 1 and a node at depth
``max_depth`` is always a digit; LRA uses depth 10 and 10 arguments and keeps expressions of
500 to 2000 tokens. LRA draws trees freely and rejects those of the wrong length, which throws
most trees away; long expressions here are mostly shaped by the depth limit (a 2000-token tree of
depth 10 must branch), so the trees resemble LRA's but are not an exact sample of LRA's trees
conditioned on length.

From Python:

    >>> import random
    >>> from graphformer.data import listops
    >>> source, target = listops.generate_listops(1, random.Random(0), min_length=8, max_length=12)[0]
    >>> listops.write_listops("data/listops", seed=1)   # train/valid/test .src and .tgt
"""

from __future__ import annotations

import random
from pathlib import Path

from graphformer.data import expressions
from graphformer.data.expressions import CLOSE

OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
DIGITS = tuple(str(d) for d in range(10))
VOCABULARY = OPERATORS + (CLOSE,) + DIGITS

# LRA's settings, the defaults here.
DEFAULT_MIN_LENGTH, DEFAULT_MAX_LENGTH, DEFAULT_MAX_DEPTH, DEFAULT_MAX_ARGS = 500, 2000, 10, 10
SPLITS = {"train": 2000, "valid": 200, "test": 200}  # modest: training at L = 2000 on CPUs is slow


def apply(operator: str, args: list[int]) -> int:
    """The value of ``operator`` applied to digit arguments."""
    if operator == "[MAX":
        return max(args)
    if operator == "[MIN":
        return min(args)
    if operator == "[MED":
        ordered, middle = sorted(args), len(args) // 2
        if len(args) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) // 2
    if operator == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown ListOps operator {operator!r}; choose one of {OPERATORS}")


def _digit(rng: random.Random, wanted: None) -> tuple[str, int]:
    digit = rng.randrange(10)
    return DIGITS[digit], digit


def _operator(rng: random.Random, n_args: int, wanted: None) -> tuple[str, list]:
    return rng.choice(OPERATORS), [None] * n_args


# Values flow bottom-up: digits are drawn uniformly and each operator computes its value.
ALGEBRA = expressions.Algebra(
    leaf=_digit, operator=_operator, apply=apply, root=lambda rng: None, answer=lambda value: DIGITS[value]
)


def generate_listops(
    n: int,
    rng: random.Random,
    min_length: int = DEFAULT_MIN_LENGTH,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_args: int = DEFAULT_MAX_ARGS,
) -> list[tuple[str, str]]:
    """``n`` (expression, answer digit) pairs, each expression between the two lengths in tokens."""
    return expressions.generate(ALGEBRA, n, rng, min_length, max_length, max_depth, max_args)


def write_listops(
    data_dir: str | Path,
    seed: int = 1,
    sizes: dict[str, int] = SPLITS,
    min_length: int = DEFAULT_MIN_LENGTH,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_args: int = DEFAULT_MAX_ARGS,
) -> Path:
    """Generate ListOps splits into ``data_dir``: ``{split}.src`` expressions, ``{split}.tgt`` digits.

    Files already there are left untouched; see `graphformer.data.splits.write_splits`.
    """
    return expressions.write("listops", ALGEBRA, data_dir, seed, sizes, (min_length, max_length, max_depth, max_args))
