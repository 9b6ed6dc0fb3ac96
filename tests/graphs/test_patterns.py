"""Sparse attention patterns: structure (property tests), parsing, and equality with dense masks."""

import networkx as nx
import pytest
import torch
from helpers import random_pairs, runnable
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import dense_copy, dense_log_probs, pattern_mask

from graphformer import GraphPool, make_model
from graphformer.decoding import translate_ids
from graphformer.errors import UserError
from graphformer.graphs import ENC, make_batch, patterns

lengths = st.integers(min_value=1, max_value=40)
sizes = st.integers(min_value=1, max_value=12)
SPECS = ["full", "window:3", "dilated:2,3", "global:2", "block:4", "random:3,7", "window:1+global:1"]


def causal_spec(spec):
    """causal- applies to one term: prefix every term of a union."""
    return "+".join("causal-" + term for term in spec.split("+"))


def edge_set(pattern, nk, nq):
    u, v = pattern(nk, nq)
    return set(zip(u.tolist(), v.tolist()))


@settings(max_examples=60, deadline=None)
@given(n=lengths, spec=st.sampled_from(SPECS + ["random:2"]))
def test_causal_patterns_have_no_future_edge(n, spec):
    u, v = patterns.parse(causal_spec(spec))(n, n)
    assert bool((u <= v).all())
    GraphPool(dec=causal_spec(spec)).graph(3, n)  # accepted as a decoder pattern, every query has a key


@settings(max_examples=60, deadline=None)
@given(n=lengths, w=sizes)
def test_window_edge_count(n, w):
    assert len(patterns.parse(f"window:{w}")(n, n)[0]) == sum(min(j, w) + min(n - 1 - j, w) + 1 for j in range(n))
    assert len(patterns.parse(f"causal-window:{w}")(n, n)[0]) == sum(min(j, w) + 1 for j in range(n))


@settings(max_examples=60, deadline=None)
@given(n=lengths, w=sizes, d=sizes)
def test_dilated_edge_count(n, w, d):
    expected = sum(1 + min(w, j // d) + min(w, (n - 1 - j) // d) for j in range(n))
    assert len(patterns.parse(f"dilated:{w},{d}")(n, n)[0]) == expected


@settings(max_examples=60, deadline=None)
@given(n=lengths, g=sizes)
def test_global_edge_count(n, g):
    k = min(g, n)
    assert len(patterns.parse(f"global:{g}")(n, n)[0]) == n * n - (n - k) ** 2


@settings(max_examples=80, deadline=None)
@given(nk=lengths, nq=st.integers(min_value=0, max_value=40), size=sizes)
def test_block_and_global_edges_are_their_definitions_over_all_pairs(nk, nq, size):
    """Both are built in O(edges); here against the predicate on every (key i, query j) pair.
    A query past the last key (cross-attention to a shorter source) sits at the last key."""
    pairs = [(i, j) for j in range(nq) for i in range(nk)]
    centre = [min(j, nk - 1) for j in range(nq)]
    assert edge_set(patterns.parse(f"block:{size}"), nk, nq) == {
        (i, j) for i, j in pairs if i // size == centre[j] // size
    }
    assert edge_set(patterns.parse(f"global:{size}"), nk, nq) == {(i, j) for i, j in pairs if i < size or j < size}
    for spec in (f"block:{size}", f"global:{size}"):  # and no edge twice
        assert len(patterns.parse(spec)(nk, nq)[0]) == len(edge_set(patterns.parse(spec), nk, nq))


@settings(max_examples=60, deadline=None)
@given(nk=lengths, nq=st.integers(min_value=0, max_value=40), w=sizes)
def test_mirror_is_the_window_reflected_and_stays_put_as_queries_are_added(nk, nq, w):
    """Query j sits at key nk - 1 - j (at key 0 past the end): where a reversed copy finds its source."""
    centre = [nk - 1 - min(j, nk - 1) for j in range(nq)]
    expected = {(i, j) for j in range(nq) for i in range(nk) if abs(i - centre[j]) <= w}
    assert edge_set(patterns.parse(f"mirror:{w}"), nk, nq) == expected
    assert {(i, j) for i, j in edge_set(patterns.parse(f"mirror:{w}"), nk, nq + 3) if j < nq} == expected


@pytest.mark.parametrize("spec", ["causal-mirror:2", "causal-window:1+causal-mirror:1"])
def test_a_mirror_has_no_causal_form(spec):
    with pytest.raises(UserError, match="^attention pattern 'causal-mirror:.*--cross-attention$"):
        patterns.parse(spec)
    with pytest.raises(Exception, match="causal"):  # nor does a decoder take it plainly
        GraphPool(dec="mirror:1")


@settings(max_examples=60, deadline=None)
@given(nk=lengths, nq=lengths, a=st.sampled_from(SPECS), b=st.sampled_from(SPECS))
def test_union_is_idempotent_and_commutative(nk, nq, a, b):
    pa, pb = patterns.parse(a), patterns.parse(b)
    assert edge_set(patterns.union(pa, pa), nk, nq) == edge_set(pa, nk, nq)
    assert edge_set(patterns.parse(f"{a}+{b}"), nk, nq) == edge_set(patterns.parse(f"{b}+{a}"), nk, nq)
    assert edge_set(patterns.parse(f"{a}+{b}"), nk, nq) == edge_set(pa, nk, nq) | edge_set(pb, nk, nq)


@settings(max_examples=40, deadline=None)
@given(n=lengths, m=lengths, spec=st.sampled_from(SPECS))
def test_patterns_are_prefix_stable(n, m, spec):
    """Keys of query j never depend on the number of queries (incremental decoding relies on it)."""
    p = patterns.parse(causal_spec(spec))
    longer = edge_set(p, m + 3, m + 3)
    assert {(i, j) for i, j in longer if j < m} == edge_set(p, m, m)
    c = patterns.parse(spec)
    assert {(i, j) for i, j in edge_set(c, n, m + 3) if j < m} == edge_set(c, n, m)


@settings(max_examples=40, deadline=None)
@given(n=lengths, m=lengths, spec=st.sampled_from(["window:1", "dilated:1,2", "block:3"]))
def test_cross_patterns_give_every_query_keys_when_the_target_is_longer(n, m, spec):
    u, v = patterns.parse(spec)(n, m)
    assert set(v.tolist()) == set(range(m))
    if m <= n:  # inside the source the pattern is the plain one
        assert edge_set(patterns.parse(spec), n, m) == {
            (i, j) for i, j in edge_set(patterns.parse(spec), max(n, m), max(n, m)) if i < n and j < m
        }


def test_causal_forms_made_in_python_are_prefix_stable_as_parsed_ones():
    """make_causal of random links (alone or in a union) draws among the keys up to the query, as
    ``causal-random`` does: filtering a draw among all keys would change as decoding adds keys."""
    made = patterns.make_causal(patterns.union(patterns.random_links(2), patterns.window(1)))
    parsed = patterns.parse("causal-random:2,0+causal-window:1")
    for n in (3, 8, 12):
        assert edge_set(made, n, n) == edge_set(parsed, n, n)
        assert {(i, j) for i, j in edge_set(made, 12, 12) if j < n} == edge_set(made, n, n)


def test_random_links_are_reproducible_and_seeded():
    a, b, c = (patterns.parse(s) for s in ("random:3,1", "random:3,1", "random:3,2"))
    assert edge_set(a, 20, 20) == edge_set(b, 20, 20) != edge_set(c, 20, 20)
    assert all(count == 3 for count in torch.bincount(a(20, 20)[1]).tolist())


def test_user_defined_patterns():
    edges = patterns.from_edges([(0, 0), (0, 1), (1, 1), (2, 2), (1, 2)])
    assert edge_set(edges, 3, 3) == {(0, 0), (0, 1), (1, 1), (2, 2), (1, 2)}
    chain = patterns.from_networkx(nx.path_graph(5))
    assert (1, 2) in edge_set(chain, 5, 5) and (2, 1) in edge_set(chain, 5, 5)
    pool = GraphPool(enc=patterns.union(chain, patterns.parse("block:1")), dec=lambda nk, nq: patterns.causal(nk, nq))
    assert pool.graph(5, 2).num_edges("enc") == 8 + 5


def test_repeated_edges_count_once_on_every_backend():
    """A user's edge list may repeat a pair; the graph keeps it once, so every backend agrees."""
    twice = patterns.from_edges([(0, 0), (1, 1), (0, 1), (0, 1), (2, 2), (1, 2), (1, 2), (0, 2)])
    pool = GraphPool(enc=twice)
    assert pool.graph(3, 1).num_edges("enc") == 6
    model = make_model(9, layers=1, d_model=8, heads=2, d_ff=16, dropout=0.0, enc_attention="full").double().eval()
    outs = []
    for backend in runnable(["dgl", "torch", "padded"]):
        with torch.no_grad():
            outs.append(
                model.encoder(
                    make_batch(pool, [[4, 5]]).relation(ENC),
                    torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
                    backend,
                )
            )
    for other in outs[1:]:
        torch.testing.assert_close(outs[0], other, atol=1e-12, rtol=0)


def test_query_without_keys_is_a_clear_error():
    with pytest.raises(UserError, match="gives query 1 no key"):
        GraphPool(cross=patterns.from_edges([(0, 0), (1, 2)])).graph(2, 5)
    with pytest.raises(UserError, match="later target token"):
        GraphPool(dec="window:2").graph(2, 5)


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("windw:3", "unknown attention pattern 'windw:3'"),
        ("full:3", "full takes no argument"),
        ("causal-causal:1", "causal takes no argument"),
        ("window:0", "must be a positive integer"),
        ("window:-2", "must be a positive integer"),
        ("window", "takes 1 integer argument"),
        ("window:a", "arguments must be integers"),
        ("window:2++full", "empty term"),
        ("", "empty attention pattern"),
        ("causal-tree:1", "no causal form"),
        ("tree:0", "must be a positive integer"),
        ("tree:1+tree:2", "one tree pattern at most"),
        ("tree", "takes 1 integer argument"),
    ],
)
def test_bad_specs(spec, msg):
    with pytest.raises(UserError, match=msg):
        patterns.parse(spec)


def test_full_pattern_is_the_core_model():
    src, tgt = random_pairs(6, 19, max_len=15)
    model = make_model(19, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0).double().eval()
    explicit = GraphPool("full", "causal-full", "full")
    with torch.no_grad():
        torch.testing.assert_close(
            model(make_batch(explicit, src, tgt)), model(make_batch(GraphPool(), src, tgt)), atol=0, rtol=0
        )


@pytest.mark.parametrize(
    "enc,dec,cross",
    [
        ("window:2", "causal-window:3", "window:4"),
        ("dilated:2,2+global:1", "causal-block:3", "block:5"),
        ("mirror:1+window:1", "causal-window:1", "mirror:2"),
    ],
)
def test_sparse_model_equals_dense_masked_transformer(enc, dec, cross):
    model = (
        make_model(
            21,
            layers=2,
            d_model=16,
            heads=2,
            d_ff=32,
            dropout=0.0,
            enc_attention=enc,
            dec_attention=dec,
            cross_attention=cross,
        )
        .double()
        .eval()
    )
    dense = dense_copy(model)
    src, tgt = [[5 + i % 13 for i in range(11)]] * 2, [[4 + i % 9 for i in range(8)], [7] * 8]
    n, m = 12, 9  # 11 source tokens and </s>
    masks = (
        pattern_mask(patterns.parse(enc), n, n),
        pattern_mask(patterns.parse(dec), m, m),
        pattern_mask(patterns.parse(cross), n, m),
    )
    with torch.no_grad():
        graph_out = model(make_batch(model.make_pool(), src, tgt))
        torch.testing.assert_close(graph_out, dense_log_probs(model, dense, src, tgt, masks), atol=1e-10, rtol=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_incremental_decoding_with_sparse_patterns(beam):
    model = make_model(
        21,
        layers=2,
        d_model=16,
        heads=2,
        d_ff=32,
        dropout=0.0,
        enc_attention="window:2",
        dec_attention="causal-window:2+causal-random:1,3",
        cross_attention="window:3+global:1",
    )
    model = model.double().eval()
    src, _ = random_pairs(7, 21, max_len=10, seed=9)
    kw = dict(beam=beam, extra_len=5, batch_tokens=20)
    fast, slow = translate_ids(model, src, incremental=True, **kw), translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-9)


@pytest.mark.parametrize(
    "huge, same",
    [
        ("window:{big}", "window:{n}"),
        ("block:{big}", "block:{n}"),
        ("dilated:{big},{big}", "dilated:1,{n}"),
        ("dilated:{big},1", "full"),
        ("global:{big}", "full"),
        ("causal-window:{big}", "causal"),
    ],
)
def test_sizes_beyond_the_sequence_give_its_edges_without_allocating_for_them(huge, same):
    """A window of 10^20 reaches no further than one of n (it used to allocate for every offset)."""
    n, big = 17, 10**20
    got = patterns.parse(huge.format(big=big, n=n))(n, n)
    want = patterns.parse(same.format(n=n))(n, n)
    assert sorted(zip(*[t.tolist() for t in got])) == sorted(zip(*[t.tolist() for t in want]))


def test_a_block_over_no_keys_has_no_edges():
    u, v = patterns.parse("block:4")(0, 3)
    assert len(u) == len(v) == 0
