"""`step_maps`: a universal model's attention per ACT step, against a dense softmax of each step's
queries and keys computed here, and against the ACT statistics of which nodes were active."""

import math

import pytest
import torch

from graphformer import make_model
from graphformer.graphs import CROSS, DEC, ENC, make_batch
from graphformer.viz.step_maps import step_maps

SOURCES = [[5, 6, 7, 8, 9], [5, 6, 11, 12, 13, 14, 15]]
TARGETS = [[5, 6, 7], [8, 9, 10, 11, 12]]


def pondering(kind="universal", seed=2, **options):
    """A small universal model whose tokens halt at different steps: its halting units' weights
    are drawn wide (the default init makes every token halt together at step 2). ``options``:
    more of `make_model`'s."""
    torch.manual_seed(seed)
    model = make_model(
        20, model=kind, d_model=16, heads=2, d_ff=16, max_depth=5, act_threshold=0.9, dropout=0.0, **options
    )
    halts = [model.encoder.halt] + ([model.decoder_halt] if kind == "universal" else [])
    for halt in halts:
        torch.nn.init.normal_(halt.proj.weight, std=3.0)
        torch.nn.init.zeros_(halt.proj.bias)
    return model.eval()


def adjacency(relation, first_key, n_keys, first_query, n_queries):
    """(queries, keys) bool: the sample's edges in the batch's whole ``relation``."""
    mask = torch.zeros(relation.num_queries, relation.num_keys, dtype=torch.bool)
    mask[relation.v, relation.u] = True
    return mask[first_query : first_query + n_queries, first_key : first_key + n_keys]


def test_each_steps_weights_are_a_dense_softmax_of_that_steps_queries_and_latest_keys():
    """Every step's q and k are caught as the shared layer projects them; a halted node keeps
    serving the keys of its last step. The softmax over the sample's edges, for the nodes active
    at the step, is what step_maps recorded; the rows of halted nodes are blank."""
    model = pondering()
    batch = make_batch(model.make_pool(), SOURCES, TARGETS)
    projected = []
    hook = model.encoder.layer.self_attn.in_proj.register_forward_hook(lambda m, i, out: projected.append(out))
    with torch.no_grad():
        stats = model(batch, full_output=True).stats["src"]
    maps = step_maps(model, batch, "enc", sample=1)
    hook.remove()
    projected = projected[: len(stats.active_nodes)]  # the first forward pass's steps
    first, n = int(batch.src_offsets[1]), int(batch.src_nodes[1])
    ponder = stats.steps
    assert maps.ponder.tolist() == ponder[first : first + n].tolist()
    assert len(set(maps.ponder.tolist())) > 1, "the test needs tokens that halt at different steps"
    heads, d_head = 2, 8
    keys = torch.zeros(len(ponder), heads, d_head)
    mask = adjacency(batch.relation(ENC), first, n, first, n)
    dense = maps.dense()
    assert maps.steps == int(ponder[first : first + n].max())
    for s in range(maps.steps):
        ids = (ponder > s).nonzero().squeeze(1)
        assert len(ids) == stats.active_nodes[s] == len(projected[s])
        q, k, _ = projected[s].view(len(ids), 3, heads, d_head).unbind(1)
        keys[ids] = k
        scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(d_head)
        mine = (ids >= first) & (ids < first + n)
        local = ids[mine] - first
        scores = scores[:, mine][:, :, first : first + n].masked_fill(~mask[local], float("-inf"))
        torch.testing.assert_close(dense[s][:, local].nan_to_num(0.0), scores.softmax(-1), rtol=0, atol=1e-5)
        halted = torch.ones(n, dtype=torch.bool)
        halted[local] = False
        assert dense[s][:, halted].isnan().all()


@pytest.mark.parametrize("sublayer", ["dec", "cross"])
def test_each_steps_edges_are_the_in_edges_of_the_nodes_still_active(sublayer):
    model = pondering()
    batch = make_batch(model.make_pool(), SOURCES, TARGETS)
    with torch.no_grad():
        stats = model(batch, full_output=True).stats["tgt"]
    maps = step_maps(model, batch, sublayer, sample=1)
    first_query, m = len(TARGETS[0]) + 1, len(TARGETS[1]) + 1  # the decoder's inputs: <s>, then the targets
    first_key, n_keys = (first_query, m) if sublayer == "dec" else (int(batch.src_offsets[1]), len(SOURCES[1]) + 1)
    mask = adjacency(batch.relation(DEC if sublayer == "dec" else CROSS), first_key, n_keys, first_query, m)
    ponder = stats.steps[first_query : first_query + m]
    assert maps.ponder.tolist() == ponder.tolist() and len(set(ponder.tolist())) > 1
    assert maps.active.sum(1).tolist() == [int((ponder > s).sum()) for s in range(maps.steps)]
    dense = maps.dense()
    for s in range(maps.steps):
        active = ponder > s
        assert torch.equal(~dense[s, 0].isnan(), mask & active[:, None])
        step = maps.step(s)
        assert set(step.queries.tolist()) == set(active.nonzero().squeeze(1).tolist())
        sums = torch.zeros(2, m).index_add_(1, step.queries, step.weights[0])
        torch.testing.assert_close(sums[:, active], torch.ones(2, int(active.sum())))


def test_a_classifier_has_steps_on_enc_only_and_the_transformer_none():
    model = pondering("universal-encoder")
    batch = make_batch(model.make_pool(), SOURCES)
    assert step_maps(model, batch, "enc", sample=0).steps >= 1
    with pytest.raises(ValueError, match="no cross attention to map"):
        step_maps(model, batch, "cross")
    transformer = make_model(20, d_model=16, heads=2, d_ff=16, layers=1)
    with pytest.raises(ValueError, match="has layers, not ACT steps"):
        step_maps(transformer, make_batch(transformer.make_pool(), SOURCES, TARGETS), "enc")


def test_a_steps_edges_keep_their_types():
    """A universal model that reads relative:2 on its encoder: each step's type ids are those of
    its own edges, query minus key clipped at 2, for the queries still pondering."""
    model = pondering(enc_edges="bias=relative:2")
    maps = step_maps(model, make_batch(model.make_pool(), SOURCES, TARGETS), "enc", sample=1)
    assert len(set(maps.ponder.tolist())) > 1
    for s in range(maps.steps):
        step = maps.step(s)
        _, ids = step.types["relative:2"]
        assert torch.equal(ids, (step.queries - step.keys).clamp(-2, 2) + 2)
        assert set(step.queries.tolist()) == set(maps.active[s].nonzero().squeeze(1).tolist())
