"""Bad input to the core raises ValueError naming the problem."""
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
