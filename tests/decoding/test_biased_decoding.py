"""Edge biases in incremental decoding: the bias of a new query, computed at its step, is the one a
full recompute of the whole prefix gives.

Two levels. The relations the incremental stepper hands the model at each step (read with
`record_attention`) must give, under every positional `EdgeBias`, exactly the newest rows of the
same bias on the training batch of each hypothesis's whole prefix (`make_batch`), greedy and beam
layouts, sentences reordered and dropped. And a model whose every attention call adds such a bias
must decode what recomputing every prefix decodes, with the sequence log-probability a
teacher-forced forward pass gives.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import backends

from graphformer import GraphPool, make_model
from graphformer.attention import BACKENDS, EdgeBias, graph_attention, record_attention
from graphformer.decoding import IncrementalStepper, translate_ids
from graphformer.graphs import CROSS, DEC, make_batch
from graphformer.graphs.edge_types import Distance, Relative, T5Buckets
from graphformer.graphs.relation import sample_of

VOCAB, HEADS, D = 23, 2, 4
POSITION_BIASED = backends(*[e.name for e in BACKENDS.entries() if e.can("position-bias")], float64=True)
SOURCES = [[7, 8, 9], [5, 6, 7, 8, 9, 10, 11, 12], [9, 10, 11, 12, 13]]  # uneven: padded memory blocks
KINDS = ["t5", "relative", "alibi", "shaw"]
# Decoder and cross patterns whose step relations are dense groups, and ones listed row by row.
POOLS = {"groups": {}, "rows": {"dec": "causal-window:2", "cross": "window:1"}}


def make_bias(kind: str, name: str, q: torch.Tensor, params: dict) -> EdgeBias:
    """The ``kind`` of bias for attention sub-layer ``name`` ('enc', 'dec', 'cross') with queries q
    (N_dst, H, d): T5's buckets (one-sided in the causal decoder), a clipped relative table, ALiBi's
    slopes times the distance, or Shaw's relative keys q . a_t / sqrt(d), one table row per query."""
    table = params[name]
    if kind == "t5":
        return EdgeBias(T5Buckets(8, 12, bidirectional=name != "dec"), table=table[:8, :, 0])
    if kind == "relative":
        return EdgeBias(Relative(3), table=table[:7, :, 0])
    if kind == "alibi":
        return EdgeBias(Distance(), slopes=-(2.0 ** -torch.arange(1.0, q.shape[1] + 1, dtype=q.dtype)))
    return EdgeBias(Relative(3), table=torch.einsum("ihd,thd->iht", q, table[:7]) / math.sqrt(q.shape[-1]))


def bias_params(heads: int, d: int, seed: int) -> dict:
    """Random (8, heads, d) tables per sub-layer, large enough to change what attention picks."""
    g = torch.Generator().manual_seed(seed)
    return {name: 2 * torch.randn(8, heads, d, generator=g, dtype=torch.float64) for name in ("enc", "dec", "cross")}


def tiny_model(kind: str = "transformer", seed: int = 0):
    torch.manual_seed(seed)
    depth = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(VOCAB, d_model=16, heads=HEADS, d_ff=32, dropout=0.0, **depth)
    return model.double().eval()


def step_relations(stepper: IncrementalStepper, tokens: torch.Tensor) -> dict:
    """Run one step; the self- and cross-attention relations it gave the model, by name."""
    with record_attention() as records:
        stepper.step(tokens)
    return {name: relation for name, relation, _ in records}


def assert_step_is_the_prefix_rows(relations, stepper, live, t, kind, backend):
    """At step t, ``relations`` (the stepper's) under a bias give the newest rows of the same bias on
    the whole prefix's batch; ``live[s]``: the source of live sentence s."""
    k, T, width = stepper.k, stepper.max_steps, stepper.width
    hyp_sources = [SOURCES[live[h // k]] for h in range(stepper.num_hyps)]
    full = make_batch(stepper.pool, hyp_sources, [[5] * t] * len(hyp_sources))
    newest = torch.cumsum(full.tgt_lengths, 0) - 1
    g = torch.Generator().manual_seed(t)
    params = bias_params(HEADS, D, seed=t)
    # Node h * T + j of the cache's table is target node j of hypothesis h; memory node s * width + j
    # is source token j of live sentence s: the full batch's nodes read their keys from there.
    target_slot = sample_of(full.tgt_lengths) * T + full.tgt_pos
    source_slot = sample_of(full.src_nodes) // k * width + full.src_pos
    for etype, key_slot, num_slots in (
        (DEC, target_slot, stepper.num_hyps * T),
        (CROSS, source_slot, len(live) * width),
    ):
        name = etype[1]
        q = torch.randn(full.num_tgt_tokens, HEADS, D, generator=g, dtype=torch.float64)
        keys, values = (torch.randn(num_slots, HEADS, D, generator=g, dtype=torch.float64) for _ in range(2))
        at_step = graph_attention(
            relations[name], q[newest], keys, values, backend, bias=make_bias(kind, name, q[newest], params)
        )
        whole = graph_attention(
            full.relation(etype), q, keys[key_slot], values[key_slot], backend, bias=make_bias(kind, name, q, params)
        )
        torch.testing.assert_close(at_step, whole[newest], msg=lambda m: f"{name} at step {t}: {m}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", sorted(POOLS))
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("backend", POSITION_BIASED)
def test_a_steps_bias_is_the_whole_prefixs_newest_rows(backend, beam, layout, kind):
    """Seven steps; after each, beam hypotheses swap places within their sentence, and after the
    third the middle sentence ends (its memory block leaves, the last one moves into its place)."""
    pool = GraphPool(**POOLS[layout])
    model = tiny_model()
    model.attention_backend = backend
    stepper = IncrementalStepper(model, make_batch(pool, SOURCES), beam, 8, pool)
    live = [0, 1, 2]
    for t in range(7):
        relations = step_relations(stepper, torch.full((stepper.num_hyps,), 5))
        assert_step_is_the_prefix_rows(relations, stepper, live, t, kind, backend)
        rotated = [s * beam + (h + 1) % beam for s in range(len(live)) for h in range(beam)]
        if t == 2:
            live.pop(1)
            rotated = rotated[:beam] + rotated[2 * beam :]
        stepper.reorder(torch.tensor(rotated))


# The same kinds as the model's edge uses: T5 one-sided in the decoder, as make_bias has it.
SPECS = {"t5": "bias=t5:8,12", "relative": "bias=relative:3", "alibi": "alibi", "shaw": "shaw=relative:3"}


def with_edges(model_kind: str, kind: str, seed: int):
    """A tiny model whose three relations use ``kind`` of edges, its learned edge tables random
    (they start at zero, which would change nothing)."""
    spec = SPECS[kind]
    torch.manual_seed(seed)
    depth = {"model": "universal", "max_depth": 3} if model_kind == "universal" else {"layers": 2}
    edges = dict(enc_edges=spec, dec_edges=spec, cross_edges=spec)
    model = make_model(VOCAB, d_model=16, heads=HEADS, d_ff=32, dropout=0.0, **depth, **edges).double().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "edges" in name:
                p.copy_(2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "model_kind,beam", [("transformer", 1), ("transformer", 3), ("universal", 1), ("universal", 3)]
)
@pytest.mark.parametrize("backend", POSITION_BIASED)
def test_biased_model_decodes_as_a_full_recompute(backend, model_kind, beam, kind):
    model = with_edges(model_kind, kind, seed=2)
    model.attention_backend = backend
    src = SOURCES + [[4, 9, 6, 13, 8, 11], [12, 5]]
    extra = 5
    options = dict(beam=beam, alpha=0.6, extra_len=extra, pool=GraphPool())
    plain = translate_ids(tiny_model(model_kind, seed=2), src, **options)
    fast = translate_ids(model, src, incremental=True, **options)
    slow = translate_ids(model, src, incremental=False, **options)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-9)
    changed = [h.score for h in fast] != pytest.approx([h.score for h in plain], abs=1e-6)
    assert changed, "the edges should change what is decoded or its scores"
    with torch.no_grad():  # each hypothesis's log-probability is its teacher-forced one
        for s, hyp in zip(src, fast):
            batch = make_batch(GraphPool(), [s], [hyp.tokens])
            log_probs = model(batch).gather(1, batch.gold[:, None]).squeeze(1)
            if len(hyp.tokens) == len(s) + 1 + extra:  # stopped by the length limit: no </s> was scored
                log_probs = log_probs[:-1]
            assert float(log_probs.sum()) == pytest.approx(hyp.log_prob, abs=1e-9)
