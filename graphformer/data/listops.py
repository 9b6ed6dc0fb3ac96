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

Shape of the trees. As in LRA, the root is at depth 1 and a node at depth ``max_depth`` is always
a digit, so at most ``max_depth - 1`` operators are nested; LRA uses depth 10 and 10 arguments
and keeps expressions of 500 to 2000 tokens. LRA draws trees freely and rejects those of the
wrong length, which throws most trees away. Here the length comes first: a target length is
drawn uniformly from [min_length, max_length], and each operator splits its token budget among
its arguments. The number of arguments is drawn uniformly among those that fit; the number of
them that are nested operators is drawn as in LRA (each with probability 1/4, ``VALUE_P``), then
clipped to the range that can still spend the budget exactly within the depth limit. Long
expressions are mostly shaped by that limit (a 2000-token tree of depth 10 must branch), so the
trees resemble LRA's but are not an exact sample of LRA's trees conditioned on length.

From Python:

    >>> import random
    >>> from graphformer.data import listops
    >>> source, target = listops.generate_listops(1, random.Random(0), min_length=8, max_length=12)[0]
    >>> listops.write_listops("data/listops", seed=1)   # train/valid/test .src and .tgt
"""

from __future__ import annotations

import random
from pathlib import Path

from graphformer.data.splits import write_splits
from graphformer.errors import ConfigError

OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
CLOSE = "]"
DIGITS = tuple(str(d) for d in range(10))
VOCABULARY = OPERATORS + (CLOSE,) + DIGITS

# LRA's settings, the defaults here.
DEFAULT_MIN_LENGTH, DEFAULT_MAX_LENGTH, DEFAULT_MAX_DEPTH, DEFAULT_MAX_ARGS = 500, 2000, 10, 10
OPERATOR_PROBABILITY = 0.25  # LRA: an argument is a nested operator with probability 1/4
SHORTEST = 4  # `[MAX 1 2 ]`: an operator, its two arguments and the closing bracket
MAX_LENGTH = 8192  # longer than any experiment here needs; refuse what is likely a typo
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


def longest(max_depth: int, max_args: int) -> int:
    """Tokens in the longest expression: every operator full, down to digits at ``max_depth``.

    ``L(max_depth) = 1`` (a digit) and ``L(d) = 2 + max_args * L(d + 1)``; the root is at depth 1.
    """
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def check_options(min_length: int, max_length: int, max_depth: int, max_args: int) -> None:
    """Refuse options that cannot give an expression, naming the option at fault."""
    for name, value in (
        ("min_length", min_length),
        ("max_length", max_length),
        ("max_depth", max_depth),
        ("max_args", max_args),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(name, f"must be a whole number, not {value!r}")
    if max_depth < 2:
        raise ConfigError("max_depth", f"must be at least 2 (the root operator over digits), not {max_depth}")
    if max_args < 4:
        # With 2 or 3 arguments some lengths cannot be built (e.g. 6 tokens with 3 arguments).
        raise ConfigError("max_args", f"must be at least 4 so that every length can be built, not {max_args}")
    if min_length < SHORTEST:
        raise ConfigError("min_length", f"must be at least {SHORTEST} (as in `[MAX 1 2 ]`), not {min_length}")
    if min_length > max_length:
        raise ConfigError("min_length", f"({min_length}) must not exceed max_length ({max_length})")
    if max_length > MAX_LENGTH:
        raise ConfigError("max_length", f"must be at most {MAX_LENGTH}, not {max_length}")
    if max_length > longest(max_depth, max_args):
        raise ConfigError(
            "max_length",
            f"must be at most {longest(max_depth, max_args)}, the longest "
            f"expression with max_depth={max_depth} and max_args={max_args}; "
            f"raise those or lower max_length",
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
    check_options(min_length, max_length, max_depth, max_args)
    # capacity[d]: the longest expression rooted at depth d (index 0 unused).
    capacity = [0] + [longest(max_depth - d + 1, max_args) for d in range(1, max_depth + 1)]
    pairs = []
    for _ in range(n):
        tokens: list[str] = []
        value = _expression(rng.randint(min_length, max_length), 1, capacity, max_args, rng, tokens)
        pairs.append((" ".join(tokens), DIGITS[value]))
    return pairs


def _expression(
    length: int, depth: int, capacity: list[int], max_args: int, rng: random.Random, tokens: list[str]
) -> int:
    """Append an expression of exactly ``length`` tokens rooted at ``depth``; return its value.

    ``length`` is 1 (a digit) or between 4 and ``capacity[depth]``; every such length can be built
    when max_args >= 4, so the arguments' lengths chosen here are always buildable one level down.
    """
    if length == 1:
        digit = rng.randrange(10)
        tokens.append(DIGITS[digit])
        return digit
    n_args, n_nested = _shape(length - 2, capacity[depth + 1], max_args, rng)
    n_digits = n_args - n_nested
    sizes = [1] * n_digits + _split(length - 2 - n_digits, n_nested, capacity[depth + 1], rng)
    rng.shuffle(sizes)
    operator = rng.choice(OPERATORS)
    tokens.append(operator)
    values = [_expression(size, depth + 1, capacity, max_args, rng, tokens) for size in sizes]
    tokens.append(CLOSE)
    return apply(operator, values)


def _shape(slots: int, arg_capacity: int, max_args: int, rng: random.Random) -> tuple[int, int]:
    """Choose (arguments k, nested operators j) for an operator whose arguments span ``slots`` tokens.

    The k - j digits take one token each, and the j operators share the remaining
    ``slots - k + j`` tokens with 4 to ``arg_capacity`` each, so j is feasible when
    ``4j <= slots - k + j <= j * arg_capacity`` (and j = 0 needs slots = k).
    """
    choices = []
    for k in range(2, min(max_args, slots) + 1):
        spare = slots - k  # tokens beyond one per argument
        if spare == 0:
            choices.append((k, 0, 0))
        elif arg_capacity > 1:
            lowest, highest = -(-spare // (arg_capacity - 1)), min(k, spare // 3)
            if lowest <= highest:
                choices.append((k, lowest, highest))
    k, lowest, highest = rng.choice(choices)
    drawn = sum(rng.random() < OPERATOR_PROBABILITY for _ in range(k))
    return k, min(max(drawn, lowest), highest)


def _split(total: int, parts: int, most: int, rng: random.Random) -> list[int]:
    """``parts`` random lengths, each from 4 to ``most``, summing to ``total``."""
    if parts == 0:
        return []
    free = total - SHORTEST * parts
    # A uniformly random composition of `free` into `parts` non-negative pieces (stars and bars).
    cuts = sorted(rng.sample(range(free + parts - 1), parts - 1))
    bounds = [-1] + cuts + [free + parts - 1]
    sizes = [SHORTEST + bounds[i + 1] - bounds[i] - 1 for i in range(parts)]
    overflow = sum(max(0, size - most) for size in sizes)
    sizes = [min(size, most) for size in sizes]
    while overflow:  # hand what went over the cap to pieces with room (total <= parts * most)
        i = rng.randrange(parts)
        extra = min(overflow, most - sizes[i])
        sizes[i] += extra
        overflow -= extra
    return sizes


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
    check_options(min_length, max_length, max_depth, max_args)  # before any folder is made
    rng = random.Random(f"listops-{seed}")
    return write_splits(
        data_dir,
        sizes,
        lambda split, n: generate_listops(n, rng, min_length, max_length, max_depth, max_args),
        "listops",
        seed,
    )
