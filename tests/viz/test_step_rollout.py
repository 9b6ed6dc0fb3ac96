"""Rollout and flow of a Universal Transformer over its ACT steps (`graphformer.viz.step_rollout`)
against a dense implementation written here: numpy products over the dense per-step maps, each
halted query's row the identity, on a real small universal model whose tokens halt at different
steps, in float64. And the same functions on a Transformer's layers give `rollout` and `flow`."""

import numpy as np
import pytest
import torch
from test_rollout import dense_flow, max_flow, model_and_batch

from graphformer import make_model
from graphformer.graphs import make_batch
from graphformer.viz import flow, rollout
from graphformer.viz.edge_maps import sublayer_maps
from graphformer.viz.step_maps import sublayer_step_maps
from graphformer.viz.step_rollout import composed

MAX_DEPTH = 4


@pytest.fixture(scope="module")
def universal():
    """A universal encoder-decoder in float64 whose halting units are redrawn wide, so that its
    tokens halt at different steps; a batch of two samples, and the step maps of the second."""
    torch.manual_seed(0)
    model = make_model(19, model="universal", max_depth=MAX_DEPTH, d_model=16, heads=2, d_ff=32, dropout=0.0)
    model = model.double()
    with torch.no_grad():
        for unit in (model.encoder.halt, model.decoder_halt):
            unit.proj.weight.normal_(0.0, 1.0)
            unit.proj.bias.fill_(0.5)
    batch = make_batch(model.make_pool(), [[4, 5, 6, 7, 8, 9, 10], [9, 10, 11, 12, 13, 14]], [[5, 6, 7, 8], [8, 9, 4]])
    stepped = sublayer_step_maps(model, batch, ("enc", "dec", "cross"), 1)
    return model, batch, stepped


def dense_steps(stepped, sublayer) -> tuple[list[np.ndarray], np.ndarray]:
    """Per step, the heads' mean with 0 where there is no edge, and (steps, queries) whether each
    query was still pondering (its row is not NaN)."""
    dense = stepped[sublayer].dense().double().numpy()  # (steps, heads, queries, keys), NaN: no edge or halted
    active = ~np.isnan(dense).all(axis=(1, 3))
    return [np.nan_to_num(step, nan=0.0).mean(0) for step in dense], active


def dense_mixed(stepped, sublayer) -> list[np.ndarray]:
    """A'_s per step: rownorm(0.5 A + 0.5 I) on a pondering query's row, the identity on a halted one's."""
    steps, active = dense_steps(stepped, sublayer)
    mixed = []
    for attention, pondering in zip(steps, active):
        a = 0.5 * attention + 0.5 * np.eye(len(attention))
        a /= a.sum(-1, keepdims=True)
        a[~pondering] = np.eye(len(attention))[~pondering]
        mixed.append(a)
    return mixed


def dense_step_rollout(stepped, sublayer) -> np.ndarray:
    product = np.eye(stepped[sublayer].maps.n_queries)
    for layer in dense_mixed(stepped, sublayer):
        product = layer @ product
    return product


def dense_step_cross(stepped) -> np.ndarray:
    """X of the composition through cross-attention, a halted query keeping all its share."""
    source = dense_step_rollout(stepped, "enc")
    cross, active = dense_steps(stepped, "cross")
    m, n = cross[0].shape
    own, read = np.eye(m), np.zeros((m, source.shape[1]))
    for self_attention, attention, pondering in zip(dense_mixed(stepped, "dec"), cross, active, strict=True):
        own, read = self_attention @ own, self_attention @ read
        kept = np.where(pondering, 0.5, 1.0)[:, None]
        rows = attention / np.maximum(attention.sum(-1, keepdims=True), 1e-300)
        padded = np.zeros((m, source.shape[1]))
        padded[:, :n] = rows
        own, read = kept * own, kept * read + (1 - kept) * padded @ source
    return read


def test_the_sample_halts_at_different_steps(universal):
    _, _, stepped = universal
    for sublayer in ("enc", "dec"):
        ponder = stepped[sublayer].ponder
        assert len(set(ponder.tolist())) > 1 and int(ponder.max()) > 1, ponder


@pytest.mark.parametrize("sublayer", ["enc", "dec"])
def test_step_rollout_is_the_dense_product_with_identity_rows_for_halted_queries(universal, sublayer):
    _, _, stepped = universal
    maps = {s: m.maps for s, m in stepped.items()}
    expected = dense_step_rollout(stepped, sublayer)
    shares = composed(maps, sublayer).numpy()
    np.testing.assert_allclose(shares, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(shares.sum(-1), 1.0, rtol=0, atol=1e-12)
    # A query that halted after step 1 composes that step alone: its row is A'_1's.
    first = int(np.argmin(stepped[sublayer].ponder.numpy()))
    if int(stepped[sublayer].ponder[first]) == 1:
        np.testing.assert_allclose(shares[first], dense_mixed(stepped, sublayer)[0][first], rtol=0, atol=1e-12)
    # Up to step 0 only: the first step's mixed matrix.
    np.testing.assert_allclose(composed(maps, sublayer, top=0).numpy(), dense_mixed(stepped, sublayer)[0], atol=1e-12)


def test_step_rollout_through_cross_attention_is_the_dense_composition(universal):
    _, _, stepped = universal
    maps = {s: m.maps for s, m in stepped.items()}
    expected = dense_step_cross(stepped)
    np.testing.assert_allclose(composed(maps, "cross").numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(composed(maps, "cross", queries=[2, 0]).numpy(), expected[[2, 0]], rtol=0, atol=1e-12)
    # <s> reads only itself (causal): it sends half of what it holds to the source at each of its steps.
    ponder = int(stepped["dec"].ponder[0])
    np.testing.assert_allclose(expected[0].sum(), 1 - 0.5**ponder, rtol=0, atol=1e-12)
    assert ((expected.sum(-1) >= 0.5) & (expected.sum(-1) < 1)).all()


def test_step_flow_is_the_dense_max_flow_with_identity_rows(universal):
    _, _, stepped = universal
    maps = {s: m.maps for s, m in stepped.items()}
    queries = [0, 3, 6]
    expected = dense_flow(dense_mixed(stepped, "enc"), queries)
    values = composed(maps, "enc", "flow", queries=queries).numpy()
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-9)
    assert (expected > 0).any() and (expected <= 1 + 1e-12).all()


def dense_step_cross_flow(stepped, queries) -> np.ndarray:
    """The layered graph through cross-attention, dense (test_rollout's dense_cross_flow), with a
    halted decoder query's middle node passing all of its capacity up (1, not 0.5)."""
    enc_mixed, dec_mixed = dense_mixed(stepped, "enc"), dense_mixed(stepped, "dec")
    cross, active = dense_steps(stepped, "cross")
    n, m = len(enc_mixed[0]), len(dec_mixed[0])
    top_enc = len(enc_mixed) * n
    dec_level = [top_enc + n + 2 * m * level for level in range(len(dec_mixed) + 1)]
    capacity = np.zeros((dec_level[-1] + m, dec_level[-1] + m))
    for level, layer in enumerate(enc_mixed, start=1):
        capacity[(level - 1) * n : level * n, level * n : (level + 1) * n] = layer.T
    for level, (self_attention, attention, pondering) in enumerate(zip(dec_mixed, cross, active), start=1):
        below, middle, above = dec_level[level - 1], dec_level[level - 1] + m, dec_level[level]
        capacity[below : below + m, middle : middle + m] = self_attention.T
        capacity[middle : middle + m, above : above + m] = np.diag(np.where(pondering, 0.5, 1.0))
        rows = attention / np.maximum(attention.sum(-1, keepdims=True), 1e-300)
        capacity[top_enc : top_enc + rows.shape[1], above : above + m] = 0.5 * rows.T
    return np.array([[max_flow(capacity, j, dec_level[-1] + q) for j in range(n)] for q in queries])


def test_step_flow_through_cross_attention_is_the_dense_max_flow(universal):
    _, _, stepped = universal
    maps = {s: m.maps for s, m in stepped.items()}
    expected = dense_step_cross_flow(stepped, [0, 2])
    values = composed(maps, "cross", "flow", queries=[0, 2]).numpy()
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-9)
    assert (expected > 0).any()


def test_on_a_transformer_the_layers_compose_as_rollout_and_flow_do():
    model, batch = model_and_batch()
    maps = sublayer_maps(model, batch, ("enc", "dec", "cross"), 0)
    for sublayer in ("enc", "dec", "cross"):
        np.testing.assert_allclose(
            composed(maps, sublayer).numpy(), rollout(model, batch, sublayer, 0).numpy(), rtol=0, atol=1e-12
        )
    np.testing.assert_allclose(
        composed(maps, "cross", "flow", queries=[1]).numpy(),
        flow(model, batch, "cross", 0, queries=[1]).numpy(),
        rtol=0,
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="unknown composition 'paths'"):
        composed(maps, "enc", "paths")
