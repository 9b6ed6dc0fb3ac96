"""Attention maps kept as edges (`graphformer.viz.edge_maps`): the same maps as dense ones, in
memory that grows with the edges, on a 2,000-token parse tree and a 4,096-token window."""

import random

import pytest
import torch
from helpers import random_pairs
from torch.profiler import ProfilerActivity, profile

from graphformer import make_model
from graphformer.attention import record_attention
from graphformer.data.listops import generate_listops
from graphformer.graphs import make_batch
from graphformer.graphs.expression_tree import parse_tree
from graphformer.graphs.pool import ENC
from graphformer.viz import EdgeMaps, attention_maps, edge_maps

TINY = dict(layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0)
WORDS = ["[MAX 1 [MIN 2 3 ] 4 ]".split(), "[SM 5 [MED 6 7 8 ] 9 ]".split(), "[MIN 1 2 ]".split()]


def transformer(**kw):
    torch.manual_seed(0)
    model = make_model(19, **TINY, **kw).double()
    src, tgt = random_pairs(3, 19, max_len=9, seed=4)
    return model, make_batch(model.make_pool(), src, tgt)


def classifier(enc_attention, edges=None, **kw):
    torch.manual_seed(0)
    model = make_model(20, 14, model="encoder", enc_attention=enc_attention, **TINY, **kw).double()
    src = [[4 + i % 16 for i in range(len(words))] for words in WORDS]
    return model, make_batch(model.make_pool(), src, edges=edges)


MODELS = {
    "transformer": lambda: transformer(),
    "sparse pattern": lambda: transformer(enc_attention="window:1+global:1", cross_attention="window:2"),
    "encoder classifier": lambda: classifier("full"),
    "parse tree": lambda: classifier("window:1+parse-tree", [parse_tree(w) for w in WORDS], pooling="last"),
}


def dense_block(model, batch, sublayer, sample):
    """The sample's (layers, heads, queries, keys) block of the whole batch's maps, NaN off the
    edges: every recorded edge written into a batch-wide dense array, then the block sliced out by
    the sample's node counts (tokens and span nodes, or targets), summed up to it here."""
    with torch.no_grad(), record_attention() as records:
        model.eval()(batch)
    sources, targets = batch.src_nodes.tolist(), batch.tgt_lengths.tolist()
    side = {"enc": (sources, sources), "dec": (targets, targets), "cross": (sources, targets)}[sublayer]
    (key_counts, query_counts), layers = side, []
    key_first, query_first = sum(key_counts[:sample]), sum(query_counts[:sample])
    n_keys = key_counts[sample] if sublayer != "cross" else int(batch.src_lengths[sample])
    for name, relation, weights in records:
        if name == sublayer:
            every = torch.full(
                (weights.shape[1], relation.num_queries, relation.num_keys), float("nan"), dtype=weights.dtype
            )
            every[:, relation.v, relation.u] = weights[:, :, 0].T
            layers.append(every[:, query_first : query_first + query_counts[sample], key_first : key_first + n_keys])
    return torch.stack(layers)


@pytest.mark.parametrize("name", MODELS)
def test_the_edges_scattered_dense_are_the_batchs_maps_of_the_sample(name):
    model, batch = MODELS[name]()
    for sublayer in ("enc",) if model.cfg.classifies else ("enc", "dec", "cross"):
        for sample in range(batch.size):
            maps = edge_maps(model, batch, sublayer, sample)
            expected = dense_block(model, batch, sublayer, sample)
            torch.testing.assert_close(maps.dense(), expected, rtol=0, atol=0, equal_nan=True)
            torch.testing.assert_close(attention_maps(model, batch, sublayer, sample), maps.dense(), equal_nan=True)
            assert maps.weights.shape == (2, 2, int((~expected[0, 0].isnan()).sum()))


def test_a_layer_and_the_head_mean_are_those_of_the_dense_maps():
    model, batch = MODELS["sparse pattern"]()
    maps = edge_maps(model, batch, "enc", sample=1)
    dense = maps.dense()
    assert torch.equal(maps.layer(-1).dense()[0].nan_to_num(-1), dense[1].nan_to_num(-1))
    torch.testing.assert_close(maps.head_mean().dense()[:, 0], dense.mean(1), equal_nan=True)
    with pytest.raises(ValueError, match="layer 2 is not one of the 2 layers of the enc maps"):
        maps.layer(2)


def test_top_edges_are_each_querys_strongest_keys_strongest_first():
    """Against a sort of each dense row; a query with fewer than k keys is padded (-1, NaN)."""
    model, batch = MODELS["parse tree"]()
    maps = edge_maps(model, batch, "enc", sample=1)
    k = 5
    keys, weights = maps.top_edges(k)
    dense = maps.dense()
    assert keys.shape == weights.shape == (2, 2, maps.n_queries, k)
    for layer in range(2):
        for head in range(2):
            for query in range(maps.n_queries):
                row = dense[layer, head, query]
                present = (~row.isnan()).nonzero()[:, 0]
                strongest = present[torch.argsort(row[present], descending=True)][:k]
                pad = k - len(strongest)
                assert keys[layer, head, query].tolist() == strongest.tolist() + [-1] * pad
                assert torch.equal(weights[layer, head, query, : len(strongest)], row[strongest])
                assert weights[layer, head, query, len(strongest) :].isnan().all()
    assert (keys[..., -1] == -1).any()  # some node has fewer than 5 keys


def recorded_in_edges(model, batch) -> EdgeMaps:
    """`edge_maps` of the encoder, checking that no step of the forward pass or of the picking
    allocates even a quarter of a float32 nodes x nodes array (the profiler's per-op sizes,
    children included)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        maps = edge_maps(model, batch, "enc")
    largest = max(event.cpu_memory_usage for event in profiled.events())
    assert 0 < largest < maps.n_queries**2  # bytes; float32 nodes x nodes is 4 n^2
    return maps


def assert_kept_as_edges(maps: EdgeMaps, nodes: int, edges: int):
    """Every tensor the maps hold grows with the edges (E), none with nodes x nodes."""
    assert (maps.n_queries, maps.n_keys) == (nodes, nodes)
    assert maps.keys.shape == maps.queries.shape == (edges,)
    assert maps.weights.shape == (2, 2, edges)
    assert edges < 12 * nodes < nodes * nodes // 100


def test_a_listops_sample_of_2000_tokens_on_its_parse_tree_is_kept_as_edges():
    ((expression, _),) = generate_listops(1, random.Random(3), min_length=1990, max_length=2000, max_depth=10)
    words = expression.split()
    assert len(words) >= 1990
    torch.manual_seed(0)
    model = make_model(
        20, 14, model="encoder", enc_attention="window:1+parse-tree", positions="none", max_len=4096,
        pooling="last", **TINY,
    )  # fmt: skip
    batch = make_batch(model.make_pool(), [[4 + i % 16 for i in range(len(words))]], edges=[parse_tree(words)])
    maps = recorded_in_edges(model, batch)
    assert_kept_as_edges(maps, len(words) + 1, batch.relation(ENC).num_edges)
    totals = torch.zeros(2, 2, maps.n_queries, dtype=maps.weights.dtype).index_add_(2, maps.queries, maps.weights)
    torch.testing.assert_close(totals, torch.ones_like(totals))
    keys, _ = maps.top_edges(4)
    assert keys.shape == (2, 2, len(words) + 1, 4)


def test_recall_at_4096_on_a_window_is_kept_as_edges():
    torch.manual_seed(0)
    model = make_model(20, 14, model="encoder", enc_attention="window:4", positions="none", max_len=4096, **TINY)
    batch = make_batch(model.make_pool(), [[4 + i % 16 for i in range(4094)]])  # with <cls> and </s>: 4,096 nodes
    maps = recorded_in_edges(model, batch)
    assert_kept_as_edges(maps, 4096, batch.relation(ENC).num_edges)
    # <cls> reads every node and every node reads it: 2 x 4,096 edges beside the window's 9 per node.
    assert int((maps.queries == 0).sum()) == 4096 and int((maps.keys == 0).sum()) == 4096
