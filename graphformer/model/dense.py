"""The graph Transformer's dense twin: the same weights in ``torch.nn.Transformer``."""

from __future__ import annotations

from torch import nn

from graphformer.model.config import ModelConfig


def to_torch_transformer(model, masks_given: bool = False) -> nn.Transformer:
    """A ``torch.nn.Transformer`` with the weights of a `graphformer.model.GraphTransformer`.

    Embeddings and generator are not part of ``nn.Transformer``: keep using the graph model's
    ``src_embed``, ``tgt_embed`` and ``generator`` around it. Dropout is 0 (for inference and
    comparison). The tests use it as the independent dense reference: with the same weights,
    PyTorch's own attention must give the graph model's numbers.

    ``nn.Transformer`` knows no attention patterns: a model with other patterns than full,
    causal and full is refused unless ``masks_given`` says the caller passes their masks.
    """
    if model.cfg.model != "transformer":
        raise ValueError("only the Transformer (model='transformer') has a torch.nn.Transformer twin")
    cfg = model.cfg
    defaults = ModelConfig.defaults()
    sparse = {
        name: getattr(cfg, name)
        for name in ("enc_attention", "dec_attention", "cross_attention")
        if getattr(cfg, name) != defaults[name]
    }
    if sparse and not masks_given:
        listed = ", ".join(f"{name}={spec!r}" for name, spec in sparse.items())
        raise ValueError(
            f"the model attends with {listed}, which torch.nn.Transformer does not know: give "
            "masks_given=True and pass the patterns' masks to it yourself"
        )
    layer = dict(
        d_model=cfg.d_model,
        nhead=cfg.heads,
        dim_feedforward=cfg.d_ff,
        dropout=0.0,
        batch_first=True,
        norm_first=cfg.norm_first,
    )
    # The encoder nn.Transformer would build, but told that pre-norm layers take no nested tensors
    # (its own check would find that out and warn at every call of this function).
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**layer),
        cfg.layers,
        nn.LayerNorm(cfg.d_model),
        enable_nested_tensor=not cfg.norm_first,
    )
    weight = next(model.parameters())  # the twin lives where the model does, in its dtype
    dense = nn.Transformer(num_decoder_layers=cfg.layers, custom_encoder=encoder, **layer).to(
        device=weight.device, dtype=weight.dtype
    )
    _copy_weights(model, dense)
    return dense


def _copy(dst: nn.Module, src: nn.Module) -> None:
    dst.load_state_dict(src.state_dict())


def _copy_weights(model, dense: nn.Transformer) -> None:
    """Every layer's projections, feed-forward and norms from ``model`` into its twin ``dense``."""
    copy, cfg = _copy, model.cfg
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
