"""attention_maps's keyword for the sub-layer: ``sublayer``, and ``relation``, the name the docs once gave it."""

import torch

from graphformer import make_model
from graphformer.graphs import make_batch
from graphformer.viz import attention_maps


def test_the_old_relation_keyword_still_picks_the_sub_layer():
    """relation='enc' maps the encoder (n x n), not the default cross-attention (m x n): the same
    maps as sublayer='enc'."""
    model = make_model(19, layers=1, d_model=16, heads=2, d_ff=32, dropout=0.0).double()
    src, tgt = [[4, 5, 6, 7]], [[8, 9]]
    batch = make_batch(model.make_pool(), src, tgt)
    old = attention_maps(model, batch, relation="enc")
    assert old.shape[2:] == (5, 5) and attention_maps(model, batch).shape[2:] == (3, 5)
    torch.testing.assert_close(old, attention_maps(model, batch, sublayer="enc"), rtol=0, atol=0, equal_nan=True)
