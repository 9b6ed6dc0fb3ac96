"""Decoding for a classifier (``model='encoder'``): the most likely label of each sample.

There is nothing to search: one forward pass gives every label's log-probability. The result has
the shape of a decoded sequence (a `Hypothesis` of one token), so ``evaluate`` scores it as exact
match (which for a classifier is accuracy) and ``translate`` prints it as a line.
"""

from __future__ import annotations

import torch

from graphformer.data.batching import DECODE_BATCH_TOKENS
from graphformer.decoding.buckets import in_length_buckets
from graphformer.decoding.search import Hypothesis
from graphformer.graphs import GraphPool, make_batch
from graphformer.model.modes import evaluating


@torch.no_grad()
def classify_ids(
    model,
    src: list[list[int]],
    pool: GraphPool | None = None,
    batch_tokens: int = DECODE_BATCH_TOKENS,
    progress=None,
    edges: list | None = None,
) -> list[Hypothesis]:
    """The predicted label of each source id sequence, in input order, in batches of at most
    ``batch_tokens`` source tokens (`decoding_batches`); ``progress(n)`` hears of each batch's n.
    ``edges``: each source's own edges, where the encoder pattern takes them (`make_batch`)."""
    pool = pool or model.make_pool()
    device = next(model.parameters()).device

    def decode(idx: list[int]) -> list[Hypothesis]:
        given = None if edges is None else [edges[i] for i in idx]
        labels, log_probs = model.predict(make_batch(pool, [src[i] for i in idx], edges=given).to(device))
        return [
            Hypothesis(tokens=[label], log_prob=log_prob, score=log_prob)
            for label, log_prob in zip(labels.tolist(), log_probs.tolist())
        ]

    with evaluating(model):
        return in_length_buckets(src, batch_tokens, decode, progress)
