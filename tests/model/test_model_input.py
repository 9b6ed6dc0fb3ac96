"""Bad input to the core raises ValueError naming the problem."""

import re

import pytest
from helpers import runnable

from graphformer import GraphPool, make_model
from graphformer.graphs import make_batch
from graphformer.graphs.heterograph import HeteroGraph


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


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"positions": "rotary"}, "positions must be one of sinusoidal, learned, none, got 'rotary'"),
        ({"tie": "some"}, "tie must be one of none, decoder, all"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1"),
        ({"act_threshold": float("nan")}, "act_threshold must be a finite number"),
        ({"layers": 0}, "layers must be at least 1"),
        ({"max_len": 10**12}, "max_len must be at most 131072 with a table of sinusoidal positions"),
        ({"layers": 2.5}, "layers must be a whole number, got 2.5"),
        ({"layers": "2"}, r"layers must be a whole number, got '2' \(text: write the number without quotes\)"),
    ],
)
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
    import torch

    from graphformer.attention import graph_attention
    from graphformer.data import recall
    from graphformer.decoding import translate_ids
    from graphformer.model.dense import to_torch_transformer
    from graphformer.viz import attention_maps

    model = tiny()
    pool = model.make_pool()
    classifier = make_model(10, 6, model="encoder", layers=1, d_model=8, heads=2, d_ff=16, max_len=16)
    cases = [
        (lambda: to_torch_transformer(tiny(enc_attention="window:1")), "torch.nn.Transformer does not know"),
        (lambda: make_batch(pool, [[4.7, 5.2]]), "source token ids must be integers"),
        (lambda: make_batch(pool, ["a b"]), "sample 0 is a str, not a sequence of token ids"),
        (lambda: make_batch(pool, [[4]], [[5.5]]), "target token ids must be integers"),
        (lambda: translate_ids(model, [[4, 5]], beam=-1), "beam must be a whole number of at least 1"),
        (lambda: translate_ids(model, [[4, 5]], beam=2.5), "beam must be a whole number of at least 1"),
        (lambda: translate_ids(model, [[4, 5]], batch_tokens=0), "batch_tokens must be a whole number of at least 1"),
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
    graph = HeteroGraph({"n": 3}, {("n", "e", "n"): (torch.tensor([0, 1, 2, 0]), torch.tensor([0, 1, 2, 2]))}, {})
    q = k = v = torch.randn(3, 2, 4)
    for backend in runnable(["dgl", "torch", "padded", "blocked"]):
        cases += [
            (lambda b=backend: graph_attention(graph, q, torch.randn(3, 3, 4), v, b), "the same heads and head size"),
            (lambda b=backend: graph_attention(graph, q[:2], k[:2], v[:2], b), "the relation has 3 key and 3 query"),
            (lambda b=backend: graph_attention(graph, q[:, 0], k[:, 0], v[:, 0], b), "(nodes, heads, d) tensors"),
        ]
    for call, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            call()


def test_python_api_misuse_found_by_a_users_review(tmp_path):
    """More misuses, each a ValueError (or the library's UserError) naming the problem instead
    of a torch or DGL error, or a silently wrong result."""
    import torch

    from graphformer.attention import graph_attention
    from graphformer.data import multi30k
    from graphformer.decoding import IncrementalStepper, beam_search, greedy_search, translate_ids
    from graphformer.errors import UserError
    from graphformer.graphs import patterns
    from graphformer.graphs.relation import Relation
    from graphformer.viz.plots import animate, ponder_map
    from graphformer.vocab import Vocab

    model = tiny()
    pool = model.make_pool()
    q = k = v = torch.randn(3, 2, 4)
    cases = [
        (lambda: translate_ids(model, [[4, 5]], beam=3, alpha=float("nan")), "alpha (the length penalty) must be"),
        (lambda: translate_ids(model, [[4, 5]], alpha=-1), "alpha (the length penalty) must be"),
        (lambda: make_batch(pool, torch.tensor([[4, 5, 6], [7, 0, 0]])), "source sample 1 holds id 0"),
        (lambda: make_batch(pool, [[4]], [[5, 2]]), "target sample 0 holds id 2"),
        (lambda: make_batch(pool, [[True, False]]), "source token ids must be integers"),
        (lambda: make_model(16, 0), "tgt_vocab must be at least 1"),
        (lambda: make_model(16, 4, model="encoder", d_model=8, heads=2, d_ff=8), "holds no label besides"),
        (lambda: Vocab.build([["a"]]).decode([-1]), "id -1 is not in this vocabulary"),
        (lambda: animate([], tmp_path / "a.gif"), "no pictures to animate"),
        (lambda: ponder_map([1, 2, 3], ["a", "b"], tmp_path / "p.png"), "3 step counts but 2 labels"),
        (lambda: greedy_search(None, torch.tensor([], dtype=torch.int64)), "max_lengths must hold"),
        (lambda: IncrementalStepper(tiny().train(), make_batch(pool, [[4, 5]]), 1, 4), "in training mode"),
        (
            lambda: beam_search(IncrementalStepper(tiny().eval(), make_batch(pool, [[4, 5]]), 1, 4), [4], beam=3),
            "the stepper holds 1 hypotheses, the search needs 3",
        ),
        (
            lambda: graph_attention(Relation(torch.tensor([0, 1]), torch.tensor([0, 1]), 3, 3), q, k, v),
            "query node 2 has no in-edges",
        ),
        (
            lambda: graph_attention(Relation(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 0, 1, 2]), 3, 3), q, k, v),
            "lists 1 edge(s) twice",
        ),
        (
            lambda: graph_attention(
                HeteroGraph({"n": 3}, {("n", "e", "n"): (torch.arange(3), torch.arange(3))}, {}), q.double(), k, v
            ),
            "one floating-point dtype",
        ),
        (
            lambda: graph_attention(
                HeteroGraph(
                    {"a": 1, "b": 1},
                    {
                        ("a", "x", "b"): (torch.tensor([0]), torch.tensor([0])),
                        ("a", "y", "b"): (torch.tensor([0]), torch.tensor([0])),
                    },
                    {},
                ),
                q[:1],
                k[:1],
                v[:1],
            ),
            "the graph has 2 relations",
        ),
        (
            lambda: GraphPool(enc=lambda nk, nq: (torch.arange(nk).float(), torch.arange(nq).float())).graph(3, 2),
            "must return integer node ids",
        ),
        (
            lambda: GraphPool(enc=lambda nk, nq: (torch.tensor([0]), torch.arange(nq))).graph(3, 2),
            "two 1-D tensors of one length",
        ),
        (lambda: GraphPool(enc=lambda nk, nq: None).graph(3, 2), "must return (u, v), two tensors"),
        (lambda: patterns.from_edges([(0, 1, 2), (1, 2, 3)]), "is no (key, query) pair"),
        (lambda: patterns.from_edges([(-1, 0)]), "is no (key, query) pair"),
        (lambda: multi30k.fetch(mirror=tmp_path, cache=tmp_path / "cache"), "holds none of the raw files"),
    ]
    for call, message in cases:
        with pytest.raises((ValueError, IndexError, UserError), match=re.escape(message)):
            call()
    limits = [4]  # a list is read as a tensor
    model.eval()
    stepper = IncrementalStepper(model, make_batch(pool, [[4, 5]]), 2, 4)  # no torch.no_grad() needed
    assert len(beam_search(stepper, limits, beam=2)) == 1
