"""The message-passing attention operators against a dense softmax."""

import pytest
import torch
from helpers import backends, dgl_missing, import_dgl, reference_backend, runnable

from graphformer import graph_attention
from graphformer.attention import BACKENDS
from graphformer.graphs import heterograph
from graphformer.graphs.heterograph import HeteroGraph
from graphformer.graphs.relation import Relation


def graph(u, v, n_keys, n_queries):
    """A one-relation graph, key u[i] -> query v[i]."""
    return HeteroGraph({"k": n_keys, "q": n_queries}, {("k", "e", "q"): (torch.as_tensor(u), torch.as_tensor(v))}, {})


def relation_of(g):
    ((utype, _, vtype),) = g.canonical_etypes
    return Relation.of_edges(*g.edges(), g.num_nodes(utype), g.num_nodes(vtype))


def dense_reference(q, k, v, mask):
    """Per-head masked softmax attention; mask[j, i] says query j may see key i."""
    scores = torch.einsum("jhd,ihd->hji", q, k) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hji,ihd->jhd", torch.softmax(scores, -1), v), torch.softmax(scores, -1)


def random_graph(n_keys, n_queries, p, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(n_queries, n_keys, generator=gen) < p
    mask[torch.arange(n_queries), torch.randint(n_keys, (n_queries,), generator=gen)] = True
    v_idx, u_idx = mask.nonzero(as_tuple=True)
    return graph(u_idx, v_idx, n_keys, n_queries), mask


def test_matches_dense_softmax_on_a_random_graph():
    g, mask = random_graph(11, 7, 0.4, seed=0)
    q, k, v = (torch.randn(n, 3, 5, dtype=torch.float64) for n in (7, 11, 11))
    out, w = graph_attention(g, q, k, v, return_weights=True)
    ref, ref_w = dense_reference(q, k, v, mask)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    u, vv = g.edges()
    torch.testing.assert_close(w[:, :, 0], ref_w[:, vv, u].T, atol=1e-12, rtol=0)


@pytest.mark.parametrize("backend", backends(*sorted(BACKENDS)))
def test_a_query_without_keys_is_an_error_on_every_backend(backend):
    g = graph([0, 1, 2], [1, 2, 2], 3, 3)  # node 0: no in-edge
    q = k = v = torch.randn(3, 2, 4)
    with pytest.raises(ValueError, match="query node 0 has no in-edges"):
        graph_attention(g, q, k, v, backend)


@pytest.mark.parametrize("backend", backends(*sorted(BACKENDS)))
def test_a_graph_listing_an_edge_twice_is_an_error_on_every_backend(backend):
    """Tiles are masks: they would count the key once where edge kernels count it twice."""
    g = graph([0, 0, 1, 1], [0, 0, 0, 1], 2, 2)
    q = k = v = torch.randn(2, 2, 4)
    with pytest.raises(ValueError, match="lists 1 edge"):
        graph_attention(g, q, k, v, backend)


@pytest.mark.parametrize("backend", backends(*sorted(BACKENDS), float64=True))
def test_a_graph_with_32_bit_ids_gives_what_64_bit_ids_give(backend):
    u, v = torch.tensor([0, 1, 1, 2, 0]), torch.tensor([0, 0, 1, 2, 2])
    q, k, w = (torch.randn(3, 2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(i)) for i in range(3))
    wide = graph_attention(graph(u, v, 3, 3), q, k, w, backend)
    narrow = graph_attention(graph(u.int(), v.int(), 3, 3), q, k, w, backend)
    torch.testing.assert_close(narrow, wide, rtol=0, atol=1e-12)


def test_a_dgl_graph_is_read_as_its_relation():
    dgl = import_dgl()
    u, v = torch.tensor([0, 1, 1, 2, 0]), torch.tensor([0, 0, 1, 2, 2])
    q, k, w = (torch.randn(3, 2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(i)) for i in range(3))
    for ids in (torch.int64, torch.int32):
        out = graph_attention(dgl.graph((u, v), num_nodes=3, idtype=ids), q, k, w)
        torch.testing.assert_close(out, graph_attention(graph(u, v, 3, 3), q, k, w), rtol=0, atol=1e-12)


def test_extreme_scores_are_finite_and_exact():
    g, mask = random_graph(9, 6, 0.5, seed=1)
    q = torch.randn(6, 2, 4, dtype=torch.float64)
    k = torch.randn(9, 2, 4, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    k = 1e4 * k / k.norm(dim=-1, keepdim=True) * q.shape[-1] ** 0.5  # scores of magnitude up to 1e4
    v = torch.randn(9, 2, 4, dtype=torch.float64)
    for sign in (1.0, -1.0):
        out = graph_attention(g, q, sign * k, v)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, dense_reference(q, sign * k, v, mask)[0], atol=1e-10, rtol=0)


def test_float32_scores_of_1e4_stay_finite():
    g, mask = random_graph(5, 5, 1.0, seed=2)
    q = torch.full((5, 1, 1), 100.0)
    k = torch.linspace(-100.0, 100.0, 5).view(5, 1, 1)  # scores from -1e4 to 1e4
    v = torch.arange(5.0).view(5, 1, 1)
    out = graph_attention(g, q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.full((5, 1, 1), 4.0))  # all weight on the largest score


def test_gradients_match_dense_softmax():
    g, mask = random_graph(8, 6, 0.5, seed=3)
    tensors = [torch.randn(n, 2, 3, dtype=torch.float64, requires_grad=True) for n in (6, 8, 8)]
    graph_attention(g, *tensors).pow(2).sum().backward()
    graph_grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    dense_reference(*tensors, mask)[0].pow(2).sum().backward()
    for mine, ref in zip(graph_grads, tensors):
        torch.testing.assert_close(mine, ref.grad, atol=1e-12, rtol=0)


def _backend_run(name, graph, q, k, v, **kw):
    for t in (q, k, v):
        t.grad = None
    relation = graph if isinstance(graph, Relation) else relation_of(graph)
    out = BACKENDS[name](relation, q, k, v, **kw)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    (out * weights).sum().backward()
    return [out.detach()] + [t.grad.clone() for t in (q, k, v)]


@pytest.mark.parametrize("n_keys,n_queries,p,block", [(37, 29, 0.2, 8), (100, 100, 0.05, 16), (130, 70, 1.0, 64)])
def test_blocked_backend_equals_edgewise_kernels(n_keys, n_queries, p, block):
    g, _ = random_graph(n_keys, n_queries, p, seed=n_keys)
    q = torch.randn(n_queries, 3, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(n_keys, 3, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    reference = _backend_run(reference_backend(), g, q, k, v)
    blocked = _backend_run("blocked", g, q, k, v, block=block)
    for a, b in zip(reference, blocked):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_blocked_backend_with_extreme_scores():
    g, mask = random_graph(9, 6, 0.5, seed=1)
    q = torch.randn(6, 2, 4, dtype=torch.float64)
    k = 1e4 * torch.nn.functional.normalize(torch.randn(9, 2, 4, dtype=torch.float64), dim=-1) * 2
    q = torch.nn.functional.normalize(q, dim=-1)
    v = torch.randn(9, 2, 4, dtype=torch.float64)
    out = BACKENDS["blocked"](relation_of(g), q, k, v, block=4)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, dense_reference(q, k, v, mask)[0], atol=1e-10, rtol=0)


@pytest.mark.parametrize("scale", [1.0, 1e4, 1e30])
def test_blocked_backend_weights_sum_to_one_for_large_float32_scores(scale):
    """The weights feed attention maps, heatmaps and animations, and the backward pass rebuilds
    them tile by tile: both must be the torch backend's, however large the scores (float32,
    whose log-sum-exp of large scores keeps no bits of the sum)."""
    from graphformer.attention import torch_ops

    g, _ = random_graph(37, 29, 0.3, seed=7)
    relation = relation_of(g)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(n, 2, 8, generator=gen) for n in (29, 37, 37))
    q = q * scale
    v.requires_grad_()
    found, reference = [], []
    for attend, results in ((lambda *a: BACKENDS["blocked"](*a, block=8), found), (torch_ops.attend, reference)):
        v.grad = None
        out, weights = attend(relation, q, k, v, True)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.extend([out.detach(), weights, v.grad.clone()])
    sums = torch.zeros(29, 2, 1).index_add_(0, relation.v, found[1])
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert torch.isfinite(found[0]).all()
    for mine, ref in zip(found, reference):  # outputs, weights, the gradient of v (the weights' own)
        torch.testing.assert_close(mine, ref)


@pytest.mark.parametrize("name", backends("dgl", "torch", "blocked", "padded"))
def test_keys_that_no_edge_names_never_reach_a_result(name):
    """A decoding cache leaves the slots past the current step unwritten, so keys that no edge
    names may hold anything: NaN there changes no output and no gradient, though the blocked
    backend's tiles span them. (The keys are listed row by row, as decoding lists them: the padded
    backend then gathers each row's keys, where a batch's tile would read its samples whole.)"""
    gen = torch.Generator().manual_seed(4)
    edges = torch.rand(21, 33, generator=gen) < 0.3  # keys 33..39 are named by no edge
    edges[:, 0] = True  # every query has a key
    rows = torch.full((21, int(edges.sum(1).max())), -1)
    for query, keys in enumerate(edges):
        rows[query, : int(keys.sum())] = keys.nonzero().squeeze(1)
    relation = Relation.of_rows(rows, 40)
    q = torch.randn(21, 3, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(40, 3, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    reference = _backend_run(reference_backend(), relation, q, k, v)
    with torch.no_grad():
        k[33:], v[33:] = float("nan"), float("nan")
    found = _backend_run(name, relation, q, k, v, **({"block": 16} if name == "blocked" else {}))
    for mine, ref in zip(found, reference):
        torch.testing.assert_close(mine, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("enc,cross", [("full", "full"), ("window:2+global:1", "window:3"), ("tree:1", "full")])
def test_the_model_gives_the_same_results_with_every_backend(enc, cross):
    from helpers import random_pairs

    from graphformer import make_model
    from graphformer.graphs import make_batch

    model = make_model(
        23, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, enc_attention=enc, cross_attention=cross
    ).double()
    src, tgt = random_pairs(9, 23, max_len=30)
    pool = model.make_pool()
    results = []
    for name in runnable(grad=True, float64=True):
        model.attention_backend = name
        model.zero_grad()
        out = model(make_batch(pool, src, tgt))  # a fresh batch: no tile layout carried over
        out.gather(1, torch.cat([torch.tensor(t + [2]) for t in tgt])[:, None]).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    for other in results[1:]:
        torch.testing.assert_close(results[0][0], other[0], atol=1e-10, rtol=0)
        for a, b in zip(results[0][1], other[1]):
            torch.testing.assert_close(a, b, atol=1e-9, rtol=0)


def test_padded_backend_weights_and_edges_across_samples():
    from graphformer.attention.padded import Segments

    # Two samples: 3 keys -> 2 queries and 4 keys -> 3 queries, random edges inside each.
    g1, m1 = random_graph(3, 2, 0.5, seed=5)
    g2, m2 = random_graph(4, 3, 0.5, seed=6)
    g = heterograph.batch([g1, g2])
    relation = Relation.of_edges(*g.edges(), 7, 5, torch.tensor([3, 4]), torch.tensor([2, 3]))
    q = torch.randn(5, 2, 4, dtype=torch.float64)
    k, v = torch.randn(7, 2, 4, dtype=torch.float64), torch.randn(7, 2, 4, dtype=torch.float64)
    out, w = BACKENDS["padded"](relation, q, k, v, return_weights=True)
    ref, ref_w = BACKENDS[reference_backend()](relation, q, k, v, return_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    u, vv = g.edges()
    with pytest.raises(ValueError, match="joins two samples"):
        Segments.of_batch(u, vv, torch.tensor([4, 3]), torch.tensor([2, 3]))


def test_decoding_with_the_padded_backend_equals_recompute():
    from helpers import random_pairs

    from graphformer import make_model
    from graphformer.decoding import translate_ids

    model = (
        make_model(
            21,
            layers=2,
            d_model=16,
            heads=2,
            d_ff=32,
            dropout=0.0,
            enc_attention="tree:1",
            dec_attention="causal-window:2",
            cross_attention="window:3+global:1",
        )
        .double()
        .eval()
    )
    src, _ = random_pairs(6, 21, max_len=11, seed=2)
    model.attention_backend = reference_backend()
    reference = translate_ids(model, src, beam=3, extra_len=4, incremental=False)
    model.attention_backend = "padded"
    fast = translate_ids(model, src, beam=3, extra_len=4, incremental=True)
    assert [h.tokens for h in fast] == [h.tokens for h in reference]
    assert [h.score for h in fast] == pytest.approx([h.score for h in reference], abs=1e-9)


def test_full_attention_is_read_in_place_stretch_by_stretch():
    """A length-sorted batch reads full attention one stretch of equal-size samples at a time, in
    place, with the numbers of the edge-wise kernel; a causal pattern, or sizes that change at
    almost every sample, keep the gathered layout."""
    from graphformer.attention.padded import Stretch, full_stretches
    from graphformer.graphs import CROSS, DEC, ENC, GraphPool, make_batch

    gen = torch.Generator().manual_seed(7)
    pool = GraphPool()
    # Three stretches of four samples: 3, 2 and 4 source tokens (+ </s>) with 2, 2 and 1 target tokens (+ <s>).
    src = [[4, 5, 6]] * 4 + [[4, 5]] * 4 + [[7, 8, 9, 10]] * 4
    tgt = [[7, 8]] * 4 + [[9, 9]] * 4 + [[5]] * 4
    batch = make_batch(pool, src, tgt)
    expected = {
        ENC: [Stretch(0, 0, 4, 4, 4), Stretch(16, 16, 4, 3, 3), Stretch(28, 28, 4, 5, 5)],
        CROSS: [Stretch(0, 0, 4, 4, 3), Stretch(16, 12, 4, 3, 3), Stretch(28, 24, 4, 5, 2)],
    }
    for etype, stretches in expected.items():
        relation = batch.relation(etype)
        assert full_stretches(relation) == stretches
        q = torch.randn(relation.num_queries, 2, 4, dtype=torch.float64, generator=gen)
        k, v = (torch.randn(relation.num_keys, 2, 4, dtype=torch.float64, generator=gen) for _ in range(2))
        torch.testing.assert_close(
            BACKENDS["padded"](relation, q, k, v), BACKENDS[reference_backend()](relation, q, k, v), atol=1e-12, rtol=0
        )
    assert full_stretches(batch.relation(DEC)) is None  # causal: not every pair is an edge
    alternating = make_batch(pool, [[4, 5, 6], [4, 5]] * 4, [[7], [7]] * 4)
    assert full_stretches(alternating.relation(ENC)) is None  # eight stretches of one sample
    one_length = make_batch(pool, [[4, 5, 6]] * 3, [[7, 8]] * 3)
    assert full_stretches(one_length.relation(ENC)) == [Stretch(0, 0, 3, 4, 4)]
    # Queries without keys (four samples of 0 keys, then four of 2, one query each) are no stretch.
    keys = torch.tensor([0] * 4 + [2] * 4)
    u = torch.arange(8)
    keyless = Relation(
        u,
        torch.repeat_interleave(torch.arange(4, 8), 2),
        8,
        8,
        key_counts=keys,
        query_counts=torch.ones(8, dtype=torch.int64),
    )
    assert full_stretches(keyless) is None


def test_stretches_refuse_an_edge_that_joins_two_samples():
    """Full attention is told by its edge count; an edge swapped across samples keeps the count,
    so counts that do not match the edges must still be refused, as the masked tiles refuse them."""
    from graphformer.attention.padded import full_stretches

    keys = torch.tensor([2] * 4 + [3] * 4)
    first = torch.cumsum(keys, 0) - keys
    u = torch.cat([f + torch.arange(n) for f, n in zip(first.tolist(), keys.tolist())])
    v = torch.repeat_interleave(torch.arange(8), keys)
    u[[0, 2]] = u[[2, 0]]  # query 0 takes a key of sample 1 and query 1 one of sample 0
    relation = Relation(u, v, int(keys.sum()), 8, key_counts=keys, query_counts=torch.ones(8, dtype=torch.int64))
    with pytest.raises(ValueError, match="joins two samples"):
        full_stretches(relation)
    q, k = torch.randn(8, 2, 4), torch.randn(int(keys.sum()), 2, 4)
    for backend in ("padded", "auto"):
        with pytest.raises(ValueError, match="joins two samples"):
            BACKENDS[backend](relation, q, k, k)


def test_training_on_runs_of_lengths_gives_the_same_gradients():
    """Encoder and cross-attention of a length-sorted batch run in place, stretch by stretch, under
    ``padded``: loss and gradients equal those of the edge-wise ``dgl`` kernels."""
    from graphformer import make_model
    from graphformer.attention.padded import full_stretches
    from graphformer.graphs import CROSS, ENC, make_batch
    from graphformer.vocab import EOS

    model = make_model(23, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0).double()
    gen = torch.Generator().manual_seed(3)
    src = [torch.randint(4, 23, (n,), generator=gen).tolist() for n in (5, 5, 5, 5, 7, 7, 7, 7)]
    tgt = [torch.randint(4, 23, (n,), generator=gen).tolist() for n in (6, 6, 6, 6, 4, 4, 4, 4)]
    results = []
    for name in (reference_backend(), "padded"):
        model.attention_backend = name
        model.zero_grad()
        batch = make_batch(model.make_pool(), src, tgt)
        assert len(full_stretches(batch.relation(ENC))) == len(full_stretches(batch.relation(CROSS))) == 2
        out = model(batch)
        out.gather(1, torch.tensor([t for y in tgt for t in (*y, EOS)])[:, None]).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-10, rtol=0)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)


@pytest.mark.parametrize("model_kind", ["transformer", "universal"])
def test_a_batch_without_targets_runs_on_every_backend(model_kind):
    """An inference batch has no target nodes: the decoder's relations have no queries."""
    from graphformer import make_model
    from graphformer.graphs import make_batch

    model = make_model(20, model=model_kind, d_model=16, heads=2, d_ff=16, dropout=0.0).eval()
    batch = make_batch(model.make_pool(), [[5, 6, 7], [8, 9]])
    for backend in runnable():
        model.attention_backend = backend
        with torch.no_grad():
            out = model(batch, full_output=True)
        assert out.log_probs.shape == (0, 20)
        if model_kind == "universal":
            assert torch.isfinite(out.aux_loss)  # the empty target side ponders nothing, not NaN


def test_a_models_backend_is_checked_when_set():
    from graphformer import make_model

    for kind in ("transformer", "universal", "encoder"):
        model = make_model(20, model=kind, d_model=16, heads=2, d_ff=16)
        model.attention_backend = "torch"
        assert model.attention_backend == "torch"
        with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
            model.attention_backend = "nope"
        assert model.attention_backend == "torch"


def test_blocked_runs_under_an_autocast_that_takes_exp_to_float32(monkeypatch):
    """CUDA autocast runs exp in float32 where CPU autocast keeps bfloat16; emulated on the CPU,
    a bfloat16 forward and backward pass through ``blocked`` runs and stays near float32's."""
    from graphformer.attention import blocked
    from graphformer.graphs import patterns

    real_exp = torch.exp

    def exp_as_under_cuda_autocast(x, *args, **kwargs):
        if torch.is_autocast_cpu_enabled() and x.dtype == torch.bfloat16:
            x = x.float()
        return real_exp(x, *args, **kwargs)

    monkeypatch.setattr(torch, "exp", exp_as_under_cuda_autocast)
    n = 1100
    relation = Relation.of_edges(*patterns.parse("window:16")(n, n), n, n)
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(n, 2, 16, generator=gen) for _ in range(3))
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = blocked.attend(relation, *leaves)
        assert out.dtype == dtype
        (out.float() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out.detach().float()] + [t.grad.float() for t in leaves])
    for exact, low in zip(*results):
        torch.testing.assert_close(low, exact, atol=3e-2, rtol=3e-2)


def test_a_graph_given_to_graph_attention_becomes_a_relation_on_the_tensors_device(monkeypatch):
    """A graph is checked where it is (the CPU) and its edges go where q, k and v are: the
    backend never meets CPU indices with GPU tensors ('meta' stands in for the GPU)."""
    seen = []
    monkeypatch.setitem(BACKENDS, "torch", lambda relation, q, k, v, **kw: seen.append(relation) or q)
    q = torch.zeros(3, 2, 4, device="meta")
    graphs = [graph([0, 1, 2], [0, 1, 2], 3, 3)]
    if not dgl_missing():  # DGL installed: its graphs too
        graphs.append(import_dgl().graph(([0, 1, 2], [0, 1, 2])))
    for g in graphs:
        graph_attention(g, q, q, q, backend="torch")
        assert seen[-1].u.device.type == seen[-1].v.device.type == "meta" and seen[-1].verified
    with pytest.raises(ValueError, match="query node 2 has no in-edges"):
        graph_attention(graph([0, 1], [0, 1], 3, 3), q, q, q, backend="torch")
