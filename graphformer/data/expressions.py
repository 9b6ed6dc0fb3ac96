"""Random bracketed prefix expressions of a chosen length: the trees behind ListOps and Boolean.

An expression is a leaf (one token) or an operator: its opener (``[MAX``), two or more arguments
and the closer ``]``. The root is at depth 1 and a node at depth ``max_depth`` is always a leaf,
so at most ``max_depth - 1`` operators are nested.

The length comes first: a target length is drawn uniformly from [min_length, max_length], and
each operator splits its token budget among its arguments. The number of arguments is drawn
uniformly among those that fit; the number of them that are nested operators is drawn as in LRA
(each with probability 1/4, ``OPERATOR_PROBABILITY``), then clipped to the range that can still
spend the budget exactly within the depth limit. A task says what the tokens and values are
with an `Algebra`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphformer.data.splits import write_splits
from graphformer.errors import ConfigError

CLOSE = "]"
OPERATOR_PROBABILITY = 0.25  # LRA: an argument is a nested operator with probability 1/4
SHORTEST = 4  # `[MAX 1 2 ]`: an operator, its two arguments and the closing bracket
MAX_LENGTH = 8192  # longer than any experiment here needs; refuse what is likely a typo


@dataclass(frozen=True)
class Algebra:
    """What fills an expression's shape. Values may be drawn bottom-up (``wanted`` is None
    everywhere: ListOps) or top-down (the root's value first, then arguments that give it:
    Boolean, so that no operator gives its value away).

    Attributes:
        leaf: ``(rng, wanted) -> (token, value)``.
        operator: ``(rng, arguments, wanted) -> (opener, the value wanted of each argument)``.
        apply: ``(opener, argument values) -> value``.
        root: ``rng -> the value wanted at the root`` (None: values flow bottom-up).
        answer: ``value -> the target token``.
    """

    leaf: Callable[[random.Random, Any], tuple[str, Any]]
    operator: Callable[[random.Random, int, Any], tuple[str, list]]
    apply: Callable[[str, list], Any]
    root: Callable[[random.Random], Any]
    answer: Callable[[Any], str]


def longest(max_depth: int, max_args: int) -> int:
    """Tokens in the longest expression: every operator full, down to leaves at ``max_depth``.

    ``L(max_depth) = 1`` (a leaf) and ``L(d) = 2 + max_args * L(d + 1)``; the root is at depth 1.
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
        raise ConfigError("max_depth", f"must be at least 2 (the root operator over leaves), not {max_depth}")
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


def generate(
    algebra: Algebra, n: int, rng: random.Random, min_length: int, max_length: int, max_depth: int, max_args: int
) -> list[tuple[str, str]]:
    """``n`` (expression, answer token) pairs, each expression between the two lengths in tokens."""
    check_options(min_length, max_length, max_depth, max_args)
    # capacity[d]: the longest expression rooted at depth d (index 0 unused).
    capacity = [0] + [longest(max_depth - d + 1, max_args) for d in range(1, max_depth + 1)]
    pairs = []
    for _ in range(n):
        tokens: list[str] = []
        length = rng.randint(min_length, max_length)
        tree = _Tree(algebra, capacity, max_args, rng, tokens)
        value = tree.expression(length, 1, algebra.root(rng))
        pairs.append((" ".join(tokens), algebra.answer(value)))
    return pairs


def write(task: str, algebra: Algebra, data_dir, seed: int, sizes: dict[str, int], shape: tuple[int, int, int, int]):
    """Generate the splits of ``task`` into ``data_dir`` (see `graphformer.data.splits.write_splits`);
    ``shape``: (min_length, max_length, max_depth, max_args), checked before any folder is made."""
    check_options(*shape)
    rng = random.Random(f"{task}-{seed}")
    return write_splits(data_dir, sizes, lambda split, n: generate(algebra, n, rng, *shape), task, seed)


@dataclass
class _Tree:
    """One expression being written into ``tokens``."""

    algebra: Algebra
    capacity: list[int]
    max_args: int
    rng: random.Random
    tokens: list[str]

    def expression(self, length: int, depth: int, wanted: Any) -> Any:
        """Append an expression of exactly ``length`` tokens rooted at ``depth``; return its value.

        ``length`` is 1 (a leaf) or between 4 and ``capacity[depth]``; every such length can be
        built when max_args >= 4, so the arguments' lengths chosen here are buildable one level down.
        """
        if length == 1:
            token, value = self.algebra.leaf(self.rng, wanted)
            self.tokens.append(token)
            return value
        room = self.capacity[depth + 1]
        n_args, n_nested = _shape(length - 2, room, self.max_args, self.rng)
        n_leaves = n_args - n_nested
        sizes = [1] * n_leaves + _split(length - 2 - n_leaves, n_nested, room, self.rng)
        self.rng.shuffle(sizes)
        opener, wants = self.algebra.operator(self.rng, n_args, wanted)
        self.tokens.append(opener)
        values = [self.expression(size, depth + 1, want) for size, want in zip(sizes, wants)]
        self.tokens.append(CLOSE)
        return self.algebra.apply(opener, values)


def _shape(slots: int, arg_capacity: int, max_args: int, rng: random.Random) -> tuple[int, int]:
    """Choose (arguments k, nested operators j) for an operator whose arguments span ``slots`` tokens.

    The k - j leaves take one token each, and the j operators share the remaining
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
