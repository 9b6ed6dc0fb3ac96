"""An independent dense reference: graphformer's weights copied into ``torch.nn.Transformer``.

The dense side pads every sequence, masks padding and the future, and runs PyTorch's own
attention; only the embeddings and generator modules are shared with the graph model.
"""
from __future__ import annotations

import torch
from torch import nn

from graphformer.vocab import EOS, PAD, SOS


def dense_copy(model) -> nn.Transformer:
    cfg = model.cfg
    dense = nn.Transformer(
        d_model=cfg.d_model, nhead=cfg.heads, num_encoder_layers=cfg.layers, num_decoder_layers=cfg.layers,
        dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True, norm_first=cfg.norm_first,
    ).to(next(model.parameters()).dtype)

    def copy(dst: nn.Module, src: nn.Module):
        dst.load_state_dict(src.state_dict())

    for mine, theirs in zip(model.encoder.layers, dense.encoder.layers):
        theirs.self_attn.in_proj_weight.data.copy_(mine.self_attn.in_proj.weight)
        theirs.self_attn.in_proj_bias.data.copy_(mine.self_attn.in_proj.bias)
        copy(theirs.self_attn.out_proj, mine.self_attn.out_proj)
        copy(theirs.linear1, mine.feed_forward.linear1)
        copy(theirs.linear2, mine.feed_forward.linear2)
        copy(theirs.norm1, mine.attn_block.norm)
        copy(theirs.norm2, mine.ff_block.norm)
    for mine, theirs in zip(model.decoder.layers, dense.decoder.layers):
        for m_attn, t_attn in ((mine.self_attn, theirs.self_attn), (mine.cross_attn, theirs.multihead_attn)):
            t_attn.in_proj_weight.data.copy_(m_attn.in_proj.weight)
            t_attn.in_proj_bias.data.copy_(m_attn.in_proj.bias)
            copy(t_attn.out_proj, m_attn.out_proj)
        copy(theirs.linear1, mine.feed_forward.linear1)
        copy(theirs.linear2, mine.feed_forward.linear2)
        copy(theirs.norm1, mine.self_block.norm)
        copy(theirs.norm2, mine.cross_block.norm)
        copy(theirs.norm3, mine.ff_block.norm)
    if cfg.norm_first:
        copy(dense.encoder.norm, model.encoder.norm)
        copy(dense.decoder.norm, model.decoder.norm)
    else:  # the paper's post-norm stack has no final norm; nn.Transformer always adds one
        dense.encoder.norm = nn.Identity()
        dense.decoder.norm = nn.Identity()
    return dense


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
        embed(model.src_embed, src_ids), embed(model.tgt_embed, tgt_in),
        src_key_padding_mask=src_mask, tgt_key_padding_mask=tgt_mask, memory_key_padding_mask=src_mask, **extra,
    )
    return model.generator(h[~tgt_mask])


def gold_of(tgt) -> torch.Tensor:
    return torch.tensor([t for y in tgt for t in (*y, EOS)])
