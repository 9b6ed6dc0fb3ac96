"""Edge biases on every backend that serves them, against a dense masked softmax in float64.

The reference builds a (H, N_dst, N_src) bias matrix entry by entry from the paper's formulas
(T5's buckets with Python's math.log, a per-type table, Shaw's q . a_t), adds it to dense scores,
masks non-edges and takes torch.softmax: nothing of graphformer's own bias code is reused.

A backend that trains only on CUDA (flex) is compared on values alone on a CPU, where it has no
backward pass, and runs uncompiled there (its compiled kernels compute in float32 at most:
tests/attention/test_flex_bias.py runs them); tests/gpu/test_gpu.py compares its gradients.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from reference import t5_bucket

from graphformer.attention import BACKENDS, EdgeBias, blocked, flex, graph_attention, padded, unavailable
from graphformer.errors import UserError
from graphformer.graphs.edge_types import Distance, Given, Relative, T5Buckets
from graphformer.graphs.relation import Relation

HEADS, D = 3, 4
# flex uncompiled: in float64, and without a compilation per case.
UNCOMPILED = {"flex": functools.partial(flex.attend, compiled=False, block=16)}


def biased_backends(capability: str) -> list[str]:
    return [e.name for e in BACKENDS.entries() if e.can(capability)]


def random_batch(seed: int, lengths=((5, 4), (7, 7), (3, 6)), density=0.5):
    """A batch of samples with (keys, queries) each, random edges inside each sample (every query
    keeps at least one key), positions 0.. per sample, a random type per edge."""
    g = torch.Generator().manual_seed(seed)
    us, vs, kpos, qpos = [], [], [], []
    k0 = q0 = 0
    for n, m in lengths:
        keep = torch.rand(m, n, generator=g) < density
        keep[torch.arange(m), torch.randint(n, (m,), generator=g)] = True
        qi, kj = keep.nonzero(as_tuple=True)
        us.append(kj + k0)
        vs.append(qi + q0)
        kpos.append(torch.arange(n))
        qpos.append(torch.arange(m))
        k0, q0 = k0 + n, q0 + m
    u, v = torch.cat(us), torch.cat(vs)
    types = torch.randint(5, (len(u),), generator=g)
    relation = Relation.of_edges(
        u,
        v,
        k0,
        q0,
        torch.tensor([n for n, _ in lengths]),
        torch.tensor([m for _, m in lengths]),
        verified=True,
        key_positions=torch.cat(kpos),
        query_positions=torch.cat(qpos),
        edge_types=types,
    )
    q = torch.randn(q0, HEADS, D, generator=g, dtype=torch.float64)
    k = torch.randn(k0, HEADS, D, generator=g, dtype=torch.float64)
    val = torch.randn(k0, HEADS, D, generator=g, dtype=torch.float64)
    return relation, q, k, val


def dense_attention(relation: Relation, q, k, v, bias_of):
    """Masked softmax over dense scores plus ``bias_of(query, key, edge)`` -> (H,) per edge."""
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D)
    mask = torch.full_like(scores, float("-inf"))
    for e, (j, i) in enumerate(zip(relation.u.tolist(), relation.v.tolist())):
        mask[:, i, j] = bias_of(i, j, e)
    weights = torch.softmax(scores + mask, dim=-1)
    return torch.einsum("hij,jhd->ihd", weights, v)


def check(backend: str, bias: EdgeBias, relation, q, k, v, bias_of, leaves=()):
    why = unavailable(backend)
    if why:
        pytest.skip(why)
    leaves = (q, k, v, *leaves)
    for t in leaves:
        t.requires_grad_(True)
    ref = dense_attention(relation, q, k, v, bias_of)
    if BACKENDS.entry(backend).can("trains-only-on-cuda") and q.device.type == "cpu":
        with torch.no_grad():  # no backward pass here: values only
            out = UNCOMPILED.get(backend, BACKENDS[backend])(relation, q, k, v, bias=bias)
        torch.testing.assert_close(out, ref.detach())
        return
    out = graph_attention(relation, q, k, v, backend, bias=bias)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, g)
    expected = torch.autograd.grad(ref, leaves, g)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", biased_backends("edge-type-bias"))
def test_a_table_per_given_type(backend):
    relation, q, k, v = random_batch(0)
    table = torch.randn(5, HEADS, dtype=torch.float64)
    types = relation.edge_types.tolist()
    bias = EdgeBias(Given(5), table=table)
    check(backend, bias, relation, q, k, v, lambda i, j, e: table[types[e]], leaves=(table,))


@pytest.mark.parametrize("backend", biased_backends("edge-type-bias"))
def test_a_value_per_edge(backend):
    """values (E, H): the bias of each edge itself (a map of its features), in the relation's edge order."""
    relation, q, k, v = random_batch(5)
    values = torch.randn(len(relation.u), HEADS, dtype=torch.float64)
    bias = EdgeBias(Given(5), values=values)
    assert bias.capability == "edge-type-bias"
    check(backend, bias, relation, q, k, v, lambda i, j, e: values[e], leaves=(values,))


def test_values_per_edge_need_a_given_derivation_and_stand_alone():
    values = torch.zeros(4, HEADS)
    with pytest.raises(ValueError, match="give it a Given derivation"):
        EdgeBias(Relative(2), values=values)
    with pytest.raises(ValueError, match="a table, slopes or values, exactly one"):
        EdgeBias(Given(5), table=torch.zeros(5, HEADS), values=values)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("backend", biased_backends("position-bias"))
def test_t5_buckets(backend, bidirectional):
    relation, q, k, v = random_batch(1, lengths=((40, 40), (33, 29)), density=0.3)
    buckets, far = 8, 20
    table = torch.randn(buckets, HEADS, dtype=torch.float64)
    qpos, kpos = relation.query_positions.tolist(), relation.key_positions.tolist()
    bias = EdgeBias(T5Buckets(buckets, far, bidirectional), table=table)

    def bias_of(i, j, e):
        return table[t5_bucket(qpos[i] - kpos[j], buckets, far, bidirectional)]

    check(backend, bias, relation, q, k, v, bias_of, leaves=(table,))


@pytest.mark.parametrize("backend", biased_backends("position-bias"))
def test_slopes_times_distance(backend):
    relation, q, k, v = random_batch(2)
    slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
    qpos, kpos = relation.query_positions.tolist(), relation.key_positions.tolist()
    bias = EdgeBias(Distance(), slopes=-slopes)
    check(backend, bias, relation, q, k, v, lambda i, j, e: -slopes * abs(qpos[i] - kpos[j]))


@pytest.mark.parametrize("backend", biased_backends("position-bias"))
def test_shaw_keys_one_row_per_query(backend):
    """Shaw's relative keys: e_ij = q_i . (k_j + a_clip(i-j)) / sqrt(d), a table per query."""
    relation, q, k, v = random_batch(3)
    clip = 2
    a = torch.randn(2 * clip + 1, HEADS, D, dtype=torch.float64, requires_grad=True)
    qpos, kpos = relation.query_positions.tolist(), relation.key_positions.tolist()
    q.requires_grad_(True)
    per_query = torch.einsum("ihd,thd->iht", q, a) / math.sqrt(D)
    bias = EdgeBias(Relative(clip), table=per_query)

    def bias_of(i, j, e):
        t = max(-clip, min(clip, qpos[i] - kpos[j])) + clip
        return (q[i] * a[t]).sum(-1) / math.sqrt(D)

    check(backend, bias, relation, q, k, v, bias_of, leaves=(a,))


def test_relative_ids_clip_on_both_sides():
    ids = Relative(2).of_offsets(torch.tensor([-7, -2, -1, 0, 1, 2, 9]))
    assert ids.tolist() == [0, 0, 1, 2, 3, 4, 4]


def test_t5_buckets_follow_the_rule_at_every_offset():
    offsets = torch.arange(-300, 301)
    for buckets, far, both in [(32, 128, True), (32, 128, False), (16, 64, True)]:
        ids = T5Buckets(buckets, far, both).of_offsets(offsets).tolist()
        assert ids == [t5_bucket(r, buckets, far, both) for r in offsets.tolist()]
        assert max(ids) == buckets - 1


def test_t5_arguments_are_refused_exactly_where_the_formula_breaks():
    """Each B, D that T5Buckets takes gives ids in range(B) that reach B - 1, the exact buckets
    0..B/4 - 1 (B/2 - 1 one-sided) first, growing with the distance; the others are refused: an
    odd B split in two, no exact bucket (log(n / 0)), or a log range that does not grow (D <= exact)."""
    offsets = torch.arange(-400, 401)
    for both in (True, False):
        for buckets in range(1, 20):
            for far in range(1, 24):
                exact = buckets // 4 if both else buckets // 2
                sound = (buckets % 2 == 0 or not both) and exact >= 1 and far > exact
                if not sound:
                    with pytest.raises(ValueError, match=f"^t5:{buckets},{far}: "):
                        T5Buckets(buckets, far, both)
                    continue
                ids = T5Buckets(buckets, far, both).of_offsets(offsets)
                assert ids.min() >= 0 and ids.max() == buckets - 1
                ahead = ids[offsets >= 0]  # keys at or before the query: 0, 1, .. exact - 1, then log buckets
                assert ahead[:exact].tolist() == list(range(exact)) and bool((ahead.diff() >= 0).all())


def test_a_backend_without_the_capability_is_refused_in_one_line():
    relation, q, k, v = random_batch(4)
    bias = EdgeBias(Given(5), table=torch.zeros(5, HEADS, dtype=torch.float64))
    lacking = [e.name for e in BACKENDS.entries() if not e.can("edge-type-bias") and not unavailable(e.name)]
    if not lacking:
        pytest.skip("every backend here serves given edge types")
    with pytest.raises(UserError, match=rf"{lacking[0]} cannot add a bias read from each edge's given type"):
        graph_attention(relation, q, k, v, lacking[0], bias=bias)


def test_a_relation_without_positions_says_so():
    relation, q, k, v = random_batch(5)
    bare = Relation.of_edges(relation.u, relation.v, relation.num_keys, relation.num_queries, verified=True)
    bias = EdgeBias(Relative(2), table=torch.zeros(5, HEADS, dtype=torch.float64))
    with pytest.raises(ValueError, match="no node positions"):
        graph_attention(bare, q, k, v, "torch", bias=bias)


def test_a_batch_relation_carries_each_nodes_position_in_its_sample():
    from graphformer.graphs.batch import CROSS, DEC, ENC, make_batch
    from graphformer.graphs.pool import GraphPool

    batch = make_batch(GraphPool(), [[5, 6, 7], [8, 9]], [[5], [6, 7, 8]])
    enc, dec, cross = (batch.relation(r) for r in (ENC, DEC, CROSS))
    assert enc.key_positions.tolist() == enc.query_positions.tolist() == [0, 1, 2, 3, 0, 1, 2]
    assert dec.query_positions.tolist() == [0, 1, 0, 1, 2, 3]
    assert cross.key_positions.tolist() == [0, 1, 2, 3, 0, 1, 2]
    assert cross.query_positions.tolist() == [0, 1, 0, 1, 2, 3]


@pytest.mark.parametrize("backend", biased_backends("position-bias"))
def test_a_sum_of_biases_is_their_sum(backend):
    """Several uses on one relation (a table by T5 bucket, ALiBi's slopes, Shaw's per-query table)
    add up, on every backend, each part read as its own kind."""
    from graphformer.attention.bias import summed

    relation, q, k, v = random_batch(6)
    table = torch.randn(8, HEADS, dtype=torch.float64)
    slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
    a = torch.randn(5, HEADS, D, dtype=torch.float64, requires_grad=True)
    q.requires_grad_(True)  # before Shaw's table is made of it: its gradient flows through both paths
    per_query = torch.einsum("ihd,thd->iht", q, a) / math.sqrt(D)
    qpos, kpos = relation.query_positions.tolist(), relation.key_positions.tolist()
    bias = summed(
        [
            EdgeBias(T5Buckets(8, 12), table=table),
            EdgeBias(Distance(), slopes=-slopes),
            EdgeBias(Relative(2), table=per_query),
        ]
    )

    def bias_of(i, j, e):
        r = qpos[i] - kpos[j]
        shaw = (q[i] * a[max(-2, min(2, r)) + 2]).sum(-1) / math.sqrt(D)
        return table[t5_bucket(r, 8, 12, True)] - slopes * abs(r) + shaw

    check(backend, bias, relation, q, k, v, bias_of, leaves=(table, a))


# Each backend's own layouts: full stretches and groups (padded), rows of keys, and several tiles
# and chunks (blocked), each with every kind of bias against the dense reference.

KINDS = ["given", "t5", "alibi", "shaw"]


def bias_of_kind(kind: str, relation: Relation, q):
    """(EdgeBias, bias_of(query, key, edge) -> (H,) from the papers' formulas, leaves whose
    gradient is checked) of one kind on ``relation``."""
    g = torch.Generator().manual_seed(11)
    qpos, kpos = relation.query_positions.tolist(), relation.key_positions.tolist()
    if kind == "given":
        table = torch.randn(5, HEADS, generator=g, dtype=torch.float64)
        types = relation.edge_types.tolist()
        return EdgeBias(Given(5), table=table), lambda i, j, e: table[types[e]], (table,)
    if kind == "t5":
        table = torch.randn(8, HEADS, generator=g, dtype=torch.float64)
        return (
            EdgeBias(T5Buckets(8, 20, True), table=table),
            lambda i, j, e: table[t5_bucket(qpos[i] - kpos[j], 8, 20, True)],
            (table,),
        )
    if kind == "alibi":
        slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
        return EdgeBias(Distance(), slopes=-slopes), lambda i, j, e: -slopes * abs(qpos[i] - kpos[j]), ()
    a = torch.randn(5, HEADS, D, generator=g, dtype=torch.float64, requires_grad=True)  # Shaw, clip 2
    q.requires_grad_(True)
    per_query = torch.einsum("ihd,thd->iht", q, a) / math.sqrt(D)

    def shaw(i, j, e):
        return (q[i] * a[max(-2, min(2, qpos[i] - kpos[j])) + 2]).sum(-1) / math.sqrt(D)

    return EdgeBias(Relative(2), table=per_query), shaw, (a,)


def backends_and_kinds() -> list[tuple[str, str]]:
    return [
        (backend, kind)
        for kind in KINDS
        for backend in biased_backends("edge-type-bias" if kind == "given" else "position-bias")
    ]


def check_kind(backend: str, kind: str, relation: Relation, seed: int):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(n, HEADS, D, generator=g, dtype=torch.float64)
        for n in (relation.num_queries, relation.num_keys, relation.num_keys)
    )
    bias, bias_of, leaves = bias_of_kind(kind, relation, q)
    check(backend, bias, relation, q, k, v, bias_of, leaves)


def with_positions_and_types(relation: Relation, seed: int) -> Relation:
    """``relation`` with random positions (0..19) for its nodes and a random type (< 5) per edge."""
    g = torch.Generator().manual_seed(seed)
    relation.key_positions = torch.randint(20, (relation.num_keys,), generator=g)
    relation.query_positions = torch.randint(20, (relation.num_queries,), generator=g)
    relation.edge_types = torch.randint(5, (relation.num_edges,), generator=g)
    return relation


@pytest.mark.parametrize("backend, kind", backends_and_kinds())
def test_full_attention_in_stretches_of_one_size(backend, kind):
    relation = random_batch(6, lengths=[(6, 5)] * 4 + [(4, 3)] * 4, density=1.0)[0]
    assert len(padded.full_stretches(relation)) == 2  # padded reads it as two stretches, in place
    check_kind(backend, kind, relation, 6)


@pytest.mark.parametrize(
    "queries, lengths",
    [(2, [4, 6, 5]), (3, 5), (1, [3, 5, 4]), (1, 4), (1, padded.SHORT_SPAN + 2)],
    ids=["uneven", "even", "one-query-uneven", "one-query-short", "one-query-long"],
)
@pytest.mark.parametrize("backend, kind", backends_and_kinds())
def test_groups_of_incremental_decoding(backend, kind, queries, lengths):
    """`Relation.of_groups`: each of padded's ways through groups (masked products, fused
    attention, one query per group, short or long), the edges built for the other backends."""
    relation = with_positions_and_types(Relation.of_groups(3, queries, padded.SHORT_SPAN + 3, lengths), 7)
    check_kind(backend, kind, relation, 7)


@pytest.mark.parametrize("backend, kind", backends_and_kinds())
def test_one_row_of_keys_per_query(backend, kind):
    g = torch.Generator().manual_seed(8)
    keys = torch.stack([torch.randperm(9, generator=g)[:4] for _ in range(6)])
    keys[:, 1:][torch.rand(6, 3, generator=g) < 0.3] = -1  # every query keeps its first key
    relation = with_positions_and_types(Relation.of_rows(keys, 9), 8)
    check_kind(backend, kind, relation, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_blocked_over_several_tiles_and_chunks(kind, monkeypatch):
    """Two samples of 140 and 100 nodes, a window of 3 and random links: blocked cuts them into
    tiles of 64 x 64, taken two per chunk, so its bias and its gradient cross tiles and chunks."""
    monkeypatch.setattr(blocked, "CHUNK_BYTES", 2 * HEADS * blocked.BLOCK**2 * 8)
    g = torch.Generator().manual_seed(9)
    us, vs, start = [], [], 0
    for n in (140, 100):
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        keep = ((i - j).abs() <= 3) | (torch.rand(n, n, generator=g) < 0.01)
        qi, kj = keep.nonzero(as_tuple=True)
        us.append(kj + start)
        vs.append(qi + start)
        start += n
    counts = torch.tensor([140, 100])
    relation = Relation.of_edges(torch.cat(us), torch.cat(vs), start, start, counts, counts, verified=True)
    relation = with_positions_and_types(relation, 9)
    assert len(blocked.layout_of(relation, blocked.BLOCK).mask) >= 6  # three chunks at least
    check_kind("blocked", kind, relation, 9)


@pytest.mark.parametrize("backend, kind", backends_and_kinds())
def test_the_active_queries_of_a_universal_transformer_step(backend, kind):
    """ACT's subgraph of active queries keeps each edge's type and each query's position."""
    relation = random_batch(10, lengths=((6, 6), (8, 8), (5, 5)), density=0.6)[0]
    active = torch.rand(relation.num_queries, generator=torch.Generator().manual_seed(10)) < 0.6
    check_kind(backend, kind, relation.restrict_to_destinations(active), 10)
