"""Attention rollout and flow (`graphformer.viz.attention_rollout`, `graphformer.viz.attention_flow`) against dense
implementations written here: matrix products in numpy, and a max-flow of our own (Edmonds-Karp
on a dense capacity matrix), on random sparse graphs with random weights, in float64."""

from collections import deque

import numpy as np
import pytest
import torch

from graphformer import make_model
from graphformer.graphs import make_batch
from graphformer.viz import EdgeMaps, attention_flow, attention_maps, flow, rollout
from graphformer.viz.attention_flow import cross_flow_rows, flow_rows, flows_into, layered_graph
from graphformer.viz.attention_rollout import (
    cross_layers,
    cross_rollout_matrix,
    cross_rollout_rows,
    mixed_layers,
    rollout_matrix,
    rollout_rows,
)

HEADS = 3


def random_maps(rng, layers, n_queries, n_keys, density=0.3, sublayer="enc") -> tuple[EdgeMaps, np.ndarray]:
    """Maps on a random sparse pattern (every query has a key) with random weights, each head's
    rows summing to 1: the `EdgeMaps` and the same weights dense, (layers, heads, queries, keys)."""
    pattern = rng.random((n_queries, n_keys)) < density
    pattern[np.arange(n_queries), rng.integers(n_keys, size=n_queries)] = True
    dense = rng.random((layers, HEADS, n_queries, n_keys)) * pattern
    dense /= dense.sum(-1, keepdims=True)
    queries, keys = pattern.nonzero()
    maps = EdgeMaps(
        sublayer=sublayer,
        n_queries=n_queries,
        n_keys=n_keys,
        keys=torch.from_numpy(keys),
        queries=torch.from_numpy(queries),
        weights=torch.from_numpy(dense[:, :, queries, keys].copy()),
    )
    return maps, dense


def residual_mixed(dense: np.ndarray) -> list[np.ndarray]:
    """0.5 A + 0.5 I per layer, heads averaged, rows renormalised, as dense matrices."""
    mixed = []
    for layer in dense.mean(1):
        a = 0.5 * layer + 0.5 * np.eye(len(layer))
        mixed.append(a / a.sum(-1, keepdims=True))
    return mixed


def dense_rollout(dense: np.ndarray) -> np.ndarray:
    product = np.eye(dense.shape[-1])
    for layer in residual_mixed(dense):
        product = layer @ product
    return product


def dense_cross_rollout(enc: np.ndarray, dec: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """T, X of the composition: T <- S' T, X <- S' X; T <- T / 2, X <- X / 2 + C R_enc / 2."""
    source, m = dense_rollout(enc), dec.shape[-1]
    own, read = np.eye(m), np.zeros((m, enc.shape[-1]))
    for self_attention, cross_attention in zip(residual_mixed(dec), cross.mean(1), strict=True):
        own, read = self_attention @ own, self_attention @ read
        own, read = 0.5 * own, 0.5 * read + 0.5 * cross_attention @ source
    return read


@pytest.mark.parametrize("layers", [1, 2, 4])
def test_rollout_is_the_product_of_the_residual_mixed_matrices(layers):
    rng = np.random.default_rng(layers)
    maps, dense = random_maps(rng, layers, 9, 9)
    expected = dense_rollout(dense)
    mixed = mixed_layers(maps)
    every = rollout_matrix(mixed)
    assert every.is_sparse and every.shape == (9, 9)
    np.testing.assert_allclose(every.to_dense().numpy(), expected, rtol=0, atol=1e-12)
    queries = torch.tensor([7, 0, 3])
    rows = rollout_rows(mixed, queries)
    np.testing.assert_allclose(rows.numpy(), expected[[7, 0, 3]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows.numpy(), every.to_dense()[queries].numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows.sum(-1).numpy(), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("encoder_layers,decoder_layers", [(1, 1), (2, 3), (3, 2)])
def test_rollout_through_cross_attention_is_the_dense_composition(encoder_layers, decoder_layers):
    rng = np.random.default_rng(10 * encoder_layers + decoder_layers)
    n, m = 8, 5
    enc_maps, enc = random_maps(rng, encoder_layers, n, n)
    dec_maps, dec = random_maps(rng, decoder_layers, m, m, sublayer="dec")
    cross_maps, cross = random_maps(rng, decoder_layers, m, n, sublayer="cross")
    expected = dense_cross_rollout(enc, dec, cross)
    encoder, decoder, cross_attention = mixed_layers(enc_maps), mixed_layers(dec_maps), cross_layers(cross_maps, n)
    every = cross_rollout_matrix(encoder, decoder, cross_attention)
    np.testing.assert_allclose(every.to_dense().numpy(), expected, rtol=0, atol=1e-12)
    rows = cross_rollout_rows(encoder, decoder, cross_attention, torch.tensor([4, 1]))
    np.testing.assert_allclose(rows.numpy(), every.to_dense()[[4, 1]].numpy(), rtol=0, atol=1e-12)
    # Half of what stays on the decoder goes to the source at each layer: 1 - 2^-L of every row.
    np.testing.assert_allclose(rows.sum(-1).numpy(), 1 - 0.5**decoder_layers, rtol=0, atol=1e-12)


def model_and_batch():
    torch.manual_seed(0)
    model = make_model(
        19, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, enc_attention="window:1+global:1",
        cross_attention="window:2",
    ).double()  # fmt: skip
    return model, make_batch(model.make_pool(), [[4, 5, 6, 7, 8], [9, 10, 11]], [[5, 6, 7], [8, 9]])


def model_maps(model, batch, sublayer, sample):
    """attention_maps with 0 where there is no edge, in numpy."""
    return attention_maps(model, batch, sublayer, sample).nan_to_num(0.0).numpy()


def test_rollout_of_a_model_is_the_dense_rollout_of_its_attention_maps():
    model, batch = model_and_batch()
    for sublayer in ("enc", "dec"):
        expected = dense_rollout(model_maps(model, batch, sublayer, 0))
        np.testing.assert_allclose(rollout(model, batch, sublayer, 0).numpy(), expected, rtol=0, atol=1e-12)
        sparse = rollout(model, batch, sublayer, 0, dense=False)
        assert sparse.is_sparse
        np.testing.assert_allclose(sparse.to_dense().numpy(), expected, rtol=0, atol=1e-12)
    enc, dec, cross = (model_maps(model, batch, s, 0) for s in ("enc", "dec", "cross"))
    expected = dense_cross_rollout(enc, dec, cross)
    np.testing.assert_allclose(rollout(model, batch, "cross", 0).numpy(), expected, rtol=0, atol=1e-12)
    rows = rollout(model, batch, "cross", 0, queries=[3, 0])
    np.testing.assert_allclose(rows.numpy(), expected[[3, 0]], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"query 4 is not a node of the sample \(0 to 3\)"):
        rollout(model, batch, "cross", 0, queries=[4])


def max_flow(capacity: np.ndarray, source: int, sink: int) -> float:
    """Edmonds-Karp on a dense capacity matrix: augment along shortest residual paths until none is left."""
    residual, total = capacity.copy(), 0.0
    while True:
        parent = {source: None}
        frontier = deque([source])
        while frontier and sink not in parent:
            node = frontier.popleft()
            for nxt in np.nonzero(residual[node] > 1e-15)[0]:
                if int(nxt) not in parent:
                    parent[int(nxt)] = node
                    frontier.append(int(nxt))
        if sink not in parent:
            return total
        path, node = [], sink
        while parent[node] is not None:
            path.append((parent[node], node))
            node = parent[node]
        push = min(residual[a, b] for a, b in path)
        for a, b in path:
            residual[a, b] -= push
            residual[b, a] += push
        total += push


def dense_flow(mixed: list[np.ndarray], queries) -> np.ndarray:
    """Flow from each input token to each query at the top, on the dense layered graph: node
    l * N + i is token i after layer l."""
    n, top = len(mixed[0]), len(mixed)
    capacity = np.zeros(((top + 1) * n, (top + 1) * n))
    for level, layer in enumerate(mixed, start=1):
        capacity[(level - 1) * n : level * n, level * n : (level + 1) * n] = layer.T  # (j below) -> (i above)
    return np.array([[max_flow(capacity, j, top * n + q) for j in range(n)] for q in queries])


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_flow_is_the_max_flow_of_the_dense_layered_graph(layers):
    rng = np.random.default_rng(100 + layers)
    maps, dense = random_maps(rng, layers, 7, 7)
    queries = [0, 4, 6]
    expected = dense_flow(residual_mixed(dense), queries)
    values = flow_rows(mixed_layers(maps), torch.tensor(queries))
    np.testing.assert_allclose(values.numpy(), expected, rtol=0, atol=1e-9)
    assert (expected > 0).any() and (expected <= 1 + 1e-12).all()


def dense_cross_flow(enc, dec, cross, queries) -> np.ndarray:
    """The layered graph through cross-attention, dense: the encoder's levels, then per decoder
    layer its inputs -> a middle copy (S'), the middle copy -> its output (0.5 each) and the
    encoder's top -> its output (0.5 C)."""
    (n, m), enc_mixed, dec_mixed = (enc.shape[-1], dec.shape[-1]), residual_mixed(enc), residual_mixed(dec)
    top_enc = len(enc_mixed) * n
    dec_level = [top_enc + n + 2 * m * level for level in range(len(dec_mixed) + 1)]  # first node of each level
    size = dec_level[-1] + m
    capacity = np.zeros((size, size))
    for level, layer in enumerate(enc_mixed, start=1):
        capacity[(level - 1) * n : level * n, level * n : (level + 1) * n] = layer.T
    for level, (self_attention, cross_attention) in enumerate(zip(dec_mixed, cross.mean(1)), start=1):
        below, middle, above = dec_level[level - 1], dec_level[level - 1] + m, dec_level[level]
        capacity[below : below + m, middle : middle + m] = self_attention.T
        capacity[middle : middle + m, above : above + m] = 0.5 * np.eye(m)
        capacity[top_enc : top_enc + n, above : above + m] = 0.5 * cross_attention.T
    return np.array([[max_flow(capacity, j, dec_level[-1] + q) for j in range(n)] for q in queries])


@pytest.mark.parametrize("encoder_layers,decoder_layers", [(1, 1), (2, 2)])
def test_flow_through_cross_attention_is_the_dense_max_flow(encoder_layers, decoder_layers):
    rng = np.random.default_rng(200 + encoder_layers + decoder_layers)
    n, m = 6, 4
    enc_maps, enc = random_maps(rng, encoder_layers, n, n)
    dec_maps, dec = random_maps(rng, decoder_layers, m, m, sublayer="dec")
    cross_maps, cross = random_maps(rng, decoder_layers, m, n, sublayer="cross")
    expected = dense_cross_flow(enc, dec, cross, [0, 3])
    values = cross_flow_rows(
        mixed_layers(enc_maps), mixed_layers(dec_maps), cross_layers(cross_maps, n), torch.tensor([0, 3])
    )
    np.testing.assert_allclose(values.numpy(), expected, rtol=0, atol=1e-9)
    assert (expected > 0).any() and (expected <= 0.5 * decoder_layers + 1e-12).all()


def test_flow_of_a_model_and_its_limit(monkeypatch):
    model, batch = model_and_batch()
    enc = model_maps(model, batch, "enc", 1)
    expected = dense_flow(residual_mixed(enc), range(enc.shape[-1]))
    np.testing.assert_allclose(flow(model, batch, "enc", 1).numpy(), expected, rtol=0, atol=1e-9)
    dec, cross = model_maps(model, batch, "dec", 1), model_maps(model, batch, "cross", 1)
    expected = dense_cross_flow(enc, dec, cross, [2, 0])
    np.testing.assert_allclose(flow(model, batch, "cross", 1, queries=[2, 0]).numpy(), expected, rtol=0, atol=1e-9)
    graph = layered_graph(mixed_layers(EdgeMaps("enc", 2, 2, torch.tensor([0, 1]), torch.tensor([0, 1]),
                                                torch.ones(3, 1, 2, dtype=torch.float64))))  # fmt: skip
    monkeypatch.setattr(attention_flow, "FLOW_LIMIT", 3 * 2 * 6 - 1)
    with pytest.raises(ValueError, match=r"^attention flow for 3 output\(s\) from 2 inputs over 6 edges is 36 units"):
        flows_into(graph, [(0, 0), (0, 1)], [(3, 0), (3, 1), (3, 0)])
    assert flows_into(graph, [(0, 0), (0, 1)], [(3, 0), (3, 1)]).tolist() == [[1.0, 0.0], [0.0, 1.0]]


def within_hops(maps: EdgeMaps, start: int, hops: int) -> set[int]:
    """The nodes from which ``start`` is reached in at most ``hops`` edges (key -> query) or self-loops."""
    reached = {start}
    for _ in range(hops):
        reached |= {int(k) for k, q in zip(maps.keys.tolist(), maps.queries.tolist()) if q in reached}
    return reached


def test_rollout_rows_of_a_2000_token_parse_tree_reach_the_roots_subtree_within_the_layers():
    """One query at the root (</s>) of a ListOps tree of 2,000 tokens: its row sums to 1 and is
    non-zero on exactly the nodes within `layers` edges of it (every softmax weight is positive)."""
    import random

    from graphformer.data.listops import generate_listops
    from graphformer.graphs.expression_tree import parse_tree
    from graphformer.viz import edge_maps

    ((expression, _),) = generate_listops(1, random.Random(3), min_length=1990, max_length=2000, max_depth=10)
    words = expression.split()
    torch.manual_seed(0)
    model = make_model(
        20, 14, model="encoder", layers=3, d_model=16, heads=2, d_ff=32, dropout=0.0, positions="none",
        max_len=4096, pooling="last", enc_attention="parse-tree",
    ).double()  # fmt: skip
    batch = make_batch(model.make_pool(), [[4 + i % 16 for i in range(len(words))]], edges=[parse_tree(words)])
    root = len(words)
    row = rollout(model, batch, "enc", queries=[root])
    assert row.shape == (1, len(words) + 1)
    np.testing.assert_allclose(float(row.sum()), 1.0, rtol=0, atol=1e-12)
    reached = within_hops(edge_maps(model, batch, "enc"), root, 3)
    assert 3 < len(reached) < len(words) // 10  # the tree's top, not the whole input
    assert set(row[0].nonzero()[:, 0].tolist()) == reached


def test_the_watch_pages_example_gives_the_shapes_it_states():
    """The page's Python block, run as written: the rollout through 2 decoder layers leaves each
    output 1 - 1/4 on the source, and the flow into </s> is one row of 4 source nodes."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "howto" / "watch.md").read_text(encoding="utf-8")
    section = page[page.index("## Rollout and flow") :]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace = {}
    exec(compile(block, "watch.md rollout block", "exec"), namespace)
    shares, paths = namespace["shares"], namespace["paths"]
    assert shares.shape == (3, 4) and paths.shape == (1, 4)
    np.testing.assert_allclose(shares.sum(-1).numpy(), 0.75, rtol=0, atol=1e-6)
    assert (paths > 0).all() and (paths <= 1 + 1e-9).all()


def test_rollout_through_cross_attention_reaches_the_span_nodes_of_a_tree_encoder():
    """With tree:1 the encoder has span nodes after the tokens; cross-attention reads tokens only,
    and the composition reaches the span nodes through the encoder's rollout."""
    torch.manual_seed(0)
    model = make_model(19, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, enc_attention="tree:1").double()
    batch = make_batch(model.make_pool(), [[4, 5, 6, 7, 8, 9, 10]], [[5, 6, 7]])
    enc, dec, cross = (model_maps(model, batch, s, 0) for s in ("enc", "dec", "cross"))
    nodes, tokens = enc.shape[-1], cross.shape[-1]
    assert nodes > tokens == 8
    padded = np.concatenate([cross, np.zeros((*cross.shape[:-1], nodes - tokens))], axis=-1)
    expected = dense_cross_rollout(enc, dec, padded)
    shares = rollout(model, batch, "cross", 0)
    assert shares.shape == (4, nodes)
    np.testing.assert_allclose(shares.numpy(), expected, rtol=0, atol=1e-12)
    assert (shares[:, tokens:] > 0).all()


def test_flow_and_rollout_reach_the_same_nodes_of_a_parse_tree():
    """Both are positive exactly where a path of the layered graph joins the input to the query:
    on a tree of 3 layers, the nodes within 3 edges of it."""
    from graphformer.graphs.expression_tree import parse_tree
    from graphformer.viz import edge_maps

    words = "[MAX 1 [MIN 2 [SM 3 4 [MED 5 6 ] ] 7 ] 8 [MIN 9 0 ] ]".split()
    torch.manual_seed(0)
    model = make_model(
        20, 14, model="encoder", layers=3, d_model=16, heads=2, d_ff=32, dropout=0.0, pooling="last",
        enc_attention="parse-tree",
    ).double()  # fmt: skip
    batch = make_batch(model.make_pool(), [[4 + i % 16 for i in range(len(words))]], edges=[parse_tree(words)])
    root, maps = len(words), edge_maps(model, batch, "enc")
    reached = within_hops(maps, root, 3)
    assert 3 < len(reached) < len(words)
    for row in (flow(model, batch, "enc", queries=[root]), rollout(model, batch, "enc", queries=[root])):
        assert set(row[0].nonzero()[:, 0].tolist()) == reached
