"""Decoding: greedy and beam search over incremental graph decoding."""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphformer.data.batching import DECODE_BATCH_TOKENS
from graphformer.decoding.buckets import in_length_buckets
from graphformer.decoding.cache import DecodingCache
from graphformer.decoding.inputs import SourceLines, encode_lines, source_limit
from graphformer.decoding.labels import classify_ids
from graphformer.decoding.search import DEFAULT_ALPHA, Hypothesis, beam_search, check_alpha, greedy_search
from graphformer.decoding.steppers import IncrementalStepper, RecomputeStepper, check_decodable, own_cross_patterns
from graphformer.graphs import GraphPool, make_batch
from graphformer.model.modes import evaluating

# Tokens an output may have beyond its source's (with `</s>`), unless asked otherwise.
EXTRA_TARGET_TOKENS = 50


def max_target_lengths(src_lengths: torch.Tensor, model_max_len: int, extra: int = EXTRA_TARGET_TOKENS) -> torch.Tensor:
    """At most ``source length + extra`` tokens (including `</s>`), within the positional table."""
    return torch.clamp(src_lengths + extra, max=model_max_len)


@torch.inference_mode()  # no autograd bookkeeping per op: a decoding step runs hundreds of small ops
def translate_ids(
    model,
    src: list[list[int]],
    *,
    beam: int = 1,
    alpha: float = DEFAULT_ALPHA,
    batch_tokens: int = DECODE_BATCH_TOKENS,
    pool: GraphPool | None = None,
    extra_len: int = EXTRA_TARGET_TOKENS,
    incremental: bool = True,
    progress: Callable[[int], object] | None = None,
    edges: list | None = None,
) -> list[Hypothesis]:
    """Decode each source id sequence; results in input order.

    Sentences are decoded in batches of similar length, at most ``batch_tokens`` source tokens each
    (`graphformer.data.batching.decoding_batches`: ``translate`` and ``evaluate`` decode in these
    batches); ``beam=1`` is greedy search. A classifier (``model.cfg.classifies``) has nothing to
    search: each result is its one most likely label. ``progress(n)``, if given, is called with
    the number of sentences each batch finished (a progress bar's ``update``). ``edges``: each
    source's own edges, where the model's patterns take them (`graphformer.graphs.make_batch`):
    the encoder's, and a cross structure derived from the source (a pattern of the sample); edges
    given for the decoder or the cross-attention need the whole target and are refused.
    """
    for name, value, low in (("beam", beam, 1), ("batch_tokens", batch_tokens, 1), ("extra_len", extra_len, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}")
    check_alpha(alpha)
    if model.cfg.classifies:
        return classify_ids(model, src, pool, batch_tokens, progress, edges)
    pool = pool or model.make_pool()
    check_decodable(pool)  # before a batch is made: one without a target's edges is refused otherwise
    device = next(model.parameters()).device

    def decode(idx: list[int]) -> list[Hypothesis]:
        chunk, given = [src[i] for i in idx], None if edges is None else [edges[i] for i in idx]
        batch = make_batch(pool, chunk, edges=given).to(device)
        limits = max_target_lengths(batch.src_lengths, model.max_target_len, extra_len)
        if incremental:
            own_cross = own_cross_patterns(pool, chunk, given)
            stepper = IncrementalStepper(model, batch, beam, int(limits.max()), pool, own_cross=own_cross)
        else:
            stepper = RecomputeStepper(model, chunk, beam, pool, device, given)
        if beam == 1:
            return greedy_search(stepper, limits)
        return beam_search(stepper, limits, beam, alpha)

    with evaluating(model):
        return in_length_buckets(src, batch_tokens, decode, progress)


__all__ = [
    "DEFAULT_ALPHA",
    "EXTRA_TARGET_TOKENS",
    "Hypothesis",
    "beam_search",
    "greedy_search",
    "IncrementalStepper",
    "DecodingCache",
    "RecomputeStepper",
    "translate_ids",
    "SourceLines",
    "encode_lines",
    "source_limit",
]
