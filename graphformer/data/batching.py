"""Length-bucketed, shuffled mini-batches, deterministic for a (seed, epoch).

Samples are sorted by length (ties broken at random), cut into batches of similar lengths, and the
batches are shuffled. Sorting keeps each batch's graphs alike in size; shuffling the batches keeps
the order of training random. A batch is limited by a sentence count or by a token budget:
source + target tokens + 1 per sample (the target's `<s>`), one less than the sample's nodes in the
batched graph (the source's `</s>` is not counted).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

# Source tokens per decoding batch (`decoding_batches`: translate, evaluate, the decoding benchmarks).
DECODE_BATCH_TOKENS = 4000
CHUNK_BATCHES = 16  # decoding sorts by length within runs of this many batches' worth of lines


def plan_batches(
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
    batch_size: int | None = None,
    batch_tokens: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
) -> list[list[int]]:
    """Lists of sample indices, one per batch. Give exactly one of batch_size and batch_tokens."""
    if (batch_size is None) == (batch_tokens is None):
        raise ValueError("give exactly one of batch_size and batch_tokens")
    if (batch_size if batch_size is not None else batch_tokens) < 1:
        raise ValueError("batch_size and batch_tokens must be positive")
    rng = random.Random(f"{seed}-{epoch}")
    order = list(range(len(src_lengths)))
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: (src_lengths[i], tgt_lengths[i]))  # stable: ties stay in random order

    batches, current, tokens = [], [], 0
    for i in order:
        size = src_lengths[i] + tgt_lengths[i] + 1  # +1: the <s>/</s> node of the target
        full = len(current) == batch_size if batch_size else tokens + size > batch_tokens
        if current and full:
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += size
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def decoding_batches(src_lengths: Sequence[int], batch_tokens: int = DECODE_BATCH_TOKENS) -> list[list[int]]:
    """How sentences are batched to decode (`graphformer.decoding.translate_ids`, and so
    ``translate``, ``evaluate`` and the decoding benchmarks): chunk by chunk (`decoding_chunks`),
    each chunk's sentences sorted by source length (no shuffling) and cut into batches of at most
    ``batch_tokens`` source tokens (+1 per sentence for its `</s>`). No padding is computed by
    graph decoding, but a batch steps until its longest output ends."""
    batches = []
    for chunk in decoding_chunks(src_lengths, batch_tokens):
        lengths = [src_lengths[i] for i in chunk]
        plan = plan_batches(lengths, [0] * len(lengths), batch_tokens=batch_tokens, shuffle=False)
        batches += [[chunk[j] for j in batch] for batch in plan]
    return batches


def decoding_chunks(src_lengths: Sequence[int], batch_tokens: int = DECODE_BATCH_TOKENS) -> list[range]:
    """Runs of consecutive sentences of about ``CHUNK_BATCHES`` batches' worth of source tokens:
    sentences are sorted by length within a chunk only (`decoding_batches`), so ``translate``
    writes each chunk's translations, in input order, before the next starts: a long input
    streams out, and an interrupted run has written a prefix of its output."""
    budget, chunks, start, total = CHUNK_BATCHES * batch_tokens, [], 0, 0
    for i, n in enumerate(src_lengths):
        if total and total + n + 1 > budget:
            chunks.append(range(start, i))
            start, total = i, 0
        total += n + 1
    if start < len(src_lengths):
        chunks.append(range(start, len(src_lengths)))
    return chunks


def shard(plan: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """This rank's batches: step s of rank r is batch s * world + r (the tail that would leave
    some rank without a batch is dropped, so every rank takes the same number of steps)."""
    steps = len(plan) // world
    return [plan[s * world + rank] for s in range(steps)]
