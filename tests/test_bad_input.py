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
    ({"max_len": 10**12}, r"max_len must be in \[1, 131072\], got 1e\+12"),
    ({"layers": 2.5}, "layers must be a whole number, got 2.5"),
])
def test_bad_hyper_parameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny(**kw)


def test_tie_all_needs_one_vocabulary():
    with pytest.raises(ValueError, match="one vocabulary"):
        make_model(10, 12, tie="all")
