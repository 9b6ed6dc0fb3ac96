"""Boolean: evaluate a nested Boolean formula to 0 or 1.

A prefix expression over the bits ``0`` and ``1`` with four gates, each opened by its name and
closed by ``]``, the same bracketed form as ListOps (so ``--enc-attention parse-tree`` reads it):

    source:  [AND 1 [OR 0 0 1 ] [NOR 0 0 ] 1 ]
    target:  1

The gates, applied to their inputs x_1 .. x_k (2 <= k <= max_args):

    [AND    1 if every x_i is 1          [NAND   not AND
    [OR     1 if some x_i is 1           [NOR    not OR

Why values are drawn top-down. Drawn bottom-up from random bits, a wide ``[AND`` is almost
always 0 and a wide ``[OR`` almost always 1, so the root's gate would give the answer away.
Here the root's value is drawn first (0 or 1, each with probability 1/2), then each gate's
inputs are drawn uniformly among those that give the gate its wanted value, down to the leaves.
Every gate, at every depth, is then 0 or 1 with probability 1/2 whatever its name or width, and
only evaluating the formula tells its value. XOR is left out: a parity is what ListOps' ``[SM``
already asks for.

The shapes of the trees are ListOps' (`graphformer.data.expressions`). The defaults keep them
deep and short enough that full attention fits a CPU budget: 100 to 500 tokens, depth 10, at
most 5 inputs per gate.

From Python:

    >>> import random
    >>> from graphformer.data import boolean
    >>> source, target = boolean.generate_boolean(1, random.Random(0), min_length=8, max_length=12)[0]
    >>> boolean.write_boolean("data/boolean", seed=1)   # train/valid/test .src and .tgt
"""

from __future__ import annotations

import random
from pathlib import Path

from graphformer.data import expressions
from graphformer.data.expressions import CLOSE

GATES = ("[AND", "[OR", "[NAND", "[NOR")
BITS = ("0", "1")
VOCABULARY = GATES + (CLOSE,) + BITS

DEFAULT_MIN_LENGTH, DEFAULT_MAX_LENGTH, DEFAULT_MAX_DEPTH, DEFAULT_MAX_ARGS = 100, 500, 10, 5
SPLITS = {"train": 8000, "valid": 200, "test": 500}


def apply(gate: str, inputs: list[int]) -> int:
    """The value of ``gate`` applied to bits."""
    if gate not in GATES:
        raise ValueError(f"unknown Boolean gate {gate!r}; choose one of {GATES}")
    value = all(inputs) if gate in ("[AND", "[NAND") else any(inputs)
    return int(value) ^ (gate in ("[NAND", "[NOR"))


def inputs_giving(gate: str, n_inputs: int, wanted: int, rng: random.Random) -> list[int]:
    """``n_inputs`` bits drawn uniformly among those for which ``gate`` gives ``wanted``."""
    conjunction = gate in ("[AND", "[NAND")
    inverted = gate in ("[NAND", "[NOR")
    # AND is 1 (and OR is 0) for one input only: all ones (all zeros).
    if (wanted ^ inverted) == conjunction:
        return [int(conjunction)] * n_inputs
    while True:  # the other value: any other input, found within 2 draws on average
        bits = [rng.randrange(2) for _ in range(n_inputs)]
        if apply(gate, bits) == wanted:
            return bits


def _bit(rng: random.Random, wanted: int) -> tuple[str, int]:
    return BITS[wanted], wanted


def _gate(rng: random.Random, n_inputs: int, wanted: int) -> tuple[str, list[int]]:
    gate = rng.choice(GATES)
    return gate, inputs_giving(gate, n_inputs, wanted, rng)


ALGEBRA = expressions.Algebra(
    leaf=_bit, operator=_gate, apply=apply, root=lambda rng: rng.randrange(2), answer=lambda value: BITS[value]
)


def generate_boolean(
    n: int,
    rng: random.Random,
    min_length: int = DEFAULT_MIN_LENGTH,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_args: int = DEFAULT_MAX_ARGS,
) -> list[tuple[str, str]]:
    """``n`` (formula, answer bit) pairs, each formula between the two lengths in tokens."""
    return expressions.generate(ALGEBRA, n, rng, min_length, max_length, max_depth, max_args)


def write_boolean(
    data_dir: str | Path,
    seed: int = 1,
    sizes: dict[str, int] = SPLITS,
    min_length: int = DEFAULT_MIN_LENGTH,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_args: int = DEFAULT_MAX_ARGS,
) -> Path:
    """Generate Boolean splits into ``data_dir``: ``{split}.src`` formulas, ``{split}.tgt`` bits.

    Files already there are left untouched; see `graphformer.data.splits.write_splits`.
    """
    return expressions.write("boolean", ALGEBRA, data_dir, seed, sizes, (min_length, max_length, max_depth, max_args))
