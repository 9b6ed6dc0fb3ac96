"""Independent references: graphformer's weights copied into ``torch.nn.Transformer``, and T5's
relative position buckets computed scalar by scalar from the paper's rule.

The dense side pads every sequence, masks padding and the future, and runs PyTorch's own
attention; only the embeddings and generator modules are shared with the graph model.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphformer.model.dense import to_torch_transformer
from graphformer.vocab import EOS, PAD, SOS


def dense_copy(model) -> nn.Transformer:
    """The model's weights in nn.Transformer; the tests pass a sparse pattern's masks themselves."""
    return to_torch_transformer(model, masks_given=True)


def pad(seqs, value=PAD) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [value] * (width - len(s)) for s in seqs], dtype=torch.int64)


def pattern_mask(pattern, n_keys, n_queries) -> torch.Tensor:
    """(n_queries, n_keys) bool mask, True where the pattern has NO edge (nn.Transformer's convention)."""
    u, v = pattern(n_keys, n_queries)
    mask = torch.ones(n_queries, n_keys, dtype=torch.bool)
    mask[v, u] = False
    return mask


def dense_log_probs(model, dense: nn.Transformer, src, tgt, masks=None) -> torch.Tensor:
    """(N_tgt, vocab) log-probabilities in the graph model's node order (padding dropped).

    ``masks`` (src_mask, tgt_mask, memory_mask) replace the default full/causal/full structure;
    they apply to every sample alike, so use them with samples of one length.
    """
    src_ids = pad([[*s, EOS] for s in src])
    tgt_in = pad([[SOS, *y] for y in tgt])
    src_mask = src_ids == PAD
    tgt_mask = pad([[SOS, *y] for y in tgt], value=-1) == -1

    def embed(embedder, ids):
        b, n = ids.shape
        pos = torch.arange(n).repeat(b)
        return embedder(ids.reshape(-1), pos).view(b, n, -1)

    m = tgt_in.shape[1]
    causal = torch.ones(m, m, dtype=torch.bool).triu(1)  # True = may not attend
    extra = {"tgt_mask": causal}
    if masks is not None:
        extra = dict(zip(("src_mask", "tgt_mask", "memory_mask"), masks))
    h = dense(
        embed(model.src_embed, src_ids),
        embed(model.tgt_embed, tgt_in),
        src_key_padding_mask=src_mask,
        tgt_key_padding_mask=tgt_mask,
        memory_key_padding_mask=src_mask,
        **extra,
    )
    return model.generator(h[~tgt_mask])


def gold_of(tgt) -> torch.Tensor:
    return torch.tensor([t for y in tgt for t in (*y, EOS)])


def t5_bucket(offset: int, buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5's bucket of query minus key position ``offset``, scalar by scalar, from the paper's rule."""
    bucket = 0
    if bidirectional:
        buckets //= 2
        if offset < 0:
            bucket = buckets
        n = abs(offset)
    else:
        n = max(offset, 0)
    exact = buckets // 2
    if n < exact:
        return bucket + n
    far = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (buckets - exact))
    return bucket + min(far, buckets - 1)
