"""Decode in length buckets, return in input order: the loop every decoder of a list of sources shares.

Sources of similar length are decoded together (`graphformer.data.batching.decoding_batches`), so
a batch wastes little padding; the caller gets one result per source, in the order it gave them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from graphformer.data.batching import decoding_batches

Result = TypeVar("Result")


def in_length_buckets(
    src: Sequence[Sequence[int]],
    batch_tokens: int,
    decode: Callable[[list[int]], Sequence[Result]],
    progress: Callable[[int], object] | None = None,
) -> list[Result]:
    """One result per source, in input order.

    decode(idx): the results of the sources ``src[i] for i in idx`` (one bucket of at most
        ``batch_tokens`` source tokens), in that order.
    progress(n), if given, hears of each bucket's number of sources (a progress bar's ``update``).
    """
    results: list[Result | None] = [None] * len(src)
    for idx in decoding_batches([len(s) for s in src], batch_tokens):
        for i, result in zip(idx, decode(idx)):
            results[i] = result
        if progress is not None:
            progress(len(idx))
    return results
