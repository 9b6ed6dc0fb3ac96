"""Bad input to the core raises ValueError naming the problem."""
import re

import pytest

from graphformer import GraphPool, make_model
from graphformer.graphs import make_batch


def tiny(**kw):
    hyper = dict(layers=1, d_model=8, heads=2, d_ff=16, max_len=16)
    return make_model(10, **{**hyper, **kw})


def test_empty_sequence():
    with pytest.raises(ValueError, match="empty source sequence"):
        make_batch(GraphPool(), [[]], [[4]])


def test_token_outside_vocabulary():
    with pytest.raises(ValueError, match="token id 12 is outside the vocabulary"):
        tiny()(make_batch(GraphPool(), [[4, 12]], [[5]]))
    with pytest.raises(ValueError, match="token id 10 is outside the vocabulary"):
        tiny()(make_batch(GraphPool(), [[4]], [[10]]))


def test_length_beyond_positional_table():
    with pytest.raises(ValueError, match="longer than the positional table"):
        tiny()(make_batch(GraphPool(), [[4] * 17], [[5]]))


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="divisible by the number of heads"):
        make_model(10, d_model=10, heads=3)


@pytest.mark.parametrize("kw,msg", [
    ({"positions": "rotary"}, "positions must be one of sinusoidal, learned, none, got 'rotary'"),
    ({"tie": "some"}, "tie must be one of none, decoder, all"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1"),
    ({"act_threshold": float("nan")}, "act_threshold must be a finite number"),
    ({"layers": 0}, "layers must be at least 1"),
    ({"max_len": 10**12}, "max_len must be at most 131072 with a table of sinusoidal positions"),
    ({"layers": 2.5}, "layers must be a whole number, got 2.5"),
])
def test_bad_hyper_parameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny(**kw)


def test_config_values_are_read_as_the_kind_their_option_declares():
    """What a config file or an older run may hold: 2.0 for a whole number, 1 for true."""
    import numpy as np
    from graphformer.model.config import ModelConfig
    cfg = ModelConfig(src_vocab=10, tgt_vocab=10, layers=2.0, d_model=np.int64(8), heads=2, norm_first=1)
    assert (cfg.layers, cfg.d_model, cfg.norm_first) == (2, 8, True)
    assert type(cfg.layers) is int and type(cfg.d_model) is int and cfg.norm_first is True
    with pytest.raises(ValueError, match="norm_first must be true or false, got 2"):
        ModelConfig(src_vocab=10, tgt_vocab=10, norm_first=2)


def test_tie_all_needs_one_vocabulary():
    with pytest.raises(ValueError, match="one vocabulary"):
        make_model(10, 12, tie="all")


def test_library_misuse_is_a_value_error_that_names_it(tmp_path):
    """Misuses found by an audit of the Python API: each a ValueError naming the problem, not an
    error from deep inside torch or DGL, and not a silently wrong result."""
    import dgl
    import torch

    from graphformer.attention import graph_attention
    from graphformer.data import recall
    from graphformer.decoding import translate_ids
    from graphformer.model.dense import to_torch_transformer
    from graphformer.viz import attention_maps
    model = tiny()
    pool = model.make_pool()
    classifier = make_model(10, 4, model="encoder", layers=1, d_model=8, heads=2, d_ff=16, max_len=16)
    cases = [
        (lambda: to_torch_transformer(tiny(enc_attention="window:1")), "torch.nn.Transformer does not know"),
        (lambda: make_batch(pool, [[4.7, 5.2]]), "source token ids must be integers"),
        (lambda: make_batch(pool, ["a b"]), "sample 0 is a str, not a sequence of token ids"),
        (lambda: make_batch(pool, [[4]], [[5.5]]), "target token ids must be integers"),
        (lambda: translate_ids(model, [[4, 5]], beam=-1), "beam must be a whole number of at least 1"),
        (lambda: translate_ids(model, [[4, 5]], beam=2.5), "beam must be a whole number of at least 1"),
        (lambda: translate_ids(model, [[4, 5]], batch_size=0), "batch_size must be a whole number of at least 1"),
        (lambda: translate_ids(model, [[4, 5]], extra_len=-5), "extra_len must be a whole number of at least 0"),
        (lambda: attention_maps(model, make_batch(pool, [[4, 5]]), "cross"), "the batch has no targets"),
        (lambda: attention_maps(model, make_batch(pool, [[4, 5]], [[6]]), "enc", sample=0.5), "is not a sample"),
        (lambda: GraphPool(enc=123), "an attention pattern is a spec string"),
        (lambda: model(make_batch(classifier.make_pool(), [[4, 5]], [[6]])), "made with a classifier's pool"),
        (lambda: classifier(make_batch(pool, [[4, 5]], [[6]])), "made with a sequence model's pool"),
        (lambda: classifier(make_batch(GraphPool(targets=False), [[4, 5]], [[6]])), "not with this encoder model's"),
        (lambda: classifier(make_batch(classifier.make_pool(), [[4, 5]], [[9]])), "label id 9 is outside the label"),
        (lambda: recall.write_recall(tmp_path / "r", sizes=[1, 2]), "sizes must map split names to sizes"),
    ]
    graph = dgl.graph(([0, 1, 2, 0], [0, 1, 2, 2]), num_nodes=3)
    q = k = v = torch.randn(3, 2, 4)
    for backend in ("dgl", "torch", "padded", "blocked"):
        cases += [
            (lambda b=backend: graph_attention(graph, q, torch.randn(3, 3, 4), v, b), "the same heads and head size"),
            (lambda b=backend: graph_attention(graph, q[:2], k[:2], v[:2], b), "the relation has 3 key and 3 query"),
            (lambda b=backend: graph_attention(graph, q[:, 0], k[:, 0], v[:, 0], b), "(nodes, heads, d) tensors"),
        ]
    for call, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            call()
