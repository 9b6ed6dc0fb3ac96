"""Per-sample edge types (graphformer.graphs.sample_types): tree roles, hops against networkx, types
and features given from Python, their refusals, and ACT's active subgraphs keeping each edge's type."""

import random

import networkx as nx
import pytest
import torch

from graphformer.errors import ConfigError, UserError
from graphformer.graphs import ENC, GraphPool, make_batch
from graphformer.graphs.expression_tree import holders, parse_tree
from graphformer.graphs.sample_types import ROLES, hop_distances, tree_parents


def typed_edges(relation):
    """{(key, query): type id} of a relation's edges."""
    return {(a, b): t for a, b, t in zip(relation.u.tolist(), relation.v.tolist(), relation.edge_types.tolist())}


def test_roles_of_a_small_parse_tree_in_a_classifier_with_cls_and_eos():
    # node:  <cls> [MAX 2 [MIN 4 ] ] </s>      the tree: </s> holds [MAX; [MAX holds 2, [MIN and its ];
    #          0     1  2   3  4 5 6  7                   [MIN holds 4 and its ]
    words = "[MAX 2 [MIN 4 ] ]".split()
    pool = GraphPool("window:1+parse-tree", targets=False, cls_node=True, edge_types={"enc": "role"})
    batch = make_batch(pool, [[5] * len(words)], [[4]], edges=[parse_tree(words)])
    expected = {(i, i): "self" for i in range(8)}
    expected |= {(0, q): "cls-token" for q in range(1, 7)} | {(k, 0): "token-cls" for k in range(1, 7)}
    expected |= {(7, 0): "eos-token", (0, 7): "token-eos"}  # </s> outranks <cls>
    expected |= {(7, 1): "eos-token", (1, 7): "token-eos", (7, 6): "eos-token", (6, 7): "token-eos"}
    for parent, child in [(1, 2), (1, 3), (1, 6), (3, 4), (3, 5)]:  # tree edges, window or not
        expected |= {(parent, child): "parent-child", (child, parent): "child-parent"}
    for a, b in [(2, 3), (4, 5), (5, 6)]:  # window neighbours that are siblings or cousins
        expected |= {(a, b): "other", (b, a): "other"}
    got = {pair: ROLES[t] for pair, t in typed_edges(batch.relation(ENC)).items()}
    assert got == expected


def test_roles_of_generated_listops_follow_each_tokens_holder():
    from graphformer.data.listops import generate_listops

    pool = GraphPool("window:2+parse-tree", targets=False, edge_types={"enc": "role"})
    samples = [s.split() for s, _ in generate_listops(6, random.Random(3), min_length=20, max_length=80)]
    batch = make_batch(
        pool, [[5] * len(w) for w in samples], [[4]] * len(samples), edges=[parse_tree(w) for w in samples]
    )
    types, first = typed_edges(batch.relation(ENC)), 0
    for words in samples:
        eos = first + len(words)
        for i, held in enumerate(holders(words)):
            if held != len(words):  # held by an operator, not by </s>
                assert ROLES[types[(first + i, first + held)]] == "child-parent"
                assert ROLES[types[(first + held, first + i)]] == "parent-child"
            else:
                assert ROLES[types[(first + i, eos)]] == "token-eos"
        tree_pairs = {(first + i, first + h) for i, h in enumerate(holders(words))}
        tree_pairs |= {(b, a) for a, b in tree_pairs}
        for (a, b), t in types.items():
            if first <= a < eos and first <= b < eos and a != b and (a, b) not in tree_pairs:
                assert ROLES[t] == "other"
        first = eos + 1


def test_tree_parents_of_a_parse_tree_are_the_holders_and_other_components_get_roots():
    words = "[MAX 2 9 [MIN 4 7 ] 0 ]".split()
    u, v = parse_tree(words)
    parent = tree_parents(u, v, len(words) + 1, root=len(words))
    assert parent.tolist() == [*holders(words), -1]
    # two components: 0 - 1 - 2 reached from the root 2, then 3 - 4 from 3 (the first node left)
    parent = tree_parents(torch.tensor([0, 1, 3]), torch.tensor([1, 2, 4]), 6, root=2)
    assert parent.tolist() == [1, 2, -1, -1, 3, -1]


@pytest.mark.parametrize("seed", range(4))
def test_hops_equal_networkx_shortest_path_lengths_on_random_graphs(seed):
    rng = random.Random(seed)
    nodes, clip = rng.randint(5, 40), rng.randint(1, 6)
    graph = nx.gnm_random_graph(nodes, rng.randint(0, 2 * nodes), seed=seed)  # often disconnected
    pairs = list(graph.edges())
    own_u, own_v = (torch.tensor([p[i] for p in pairs], dtype=torch.int64) for i in (0, 1))
    u, v = torch.randint(0, nodes, (300,), generator=torch.Generator().manual_seed(seed)).view(2, -1)
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    expected = [min(lengths[a].get(b, clip + 1), clip + 1) for a, b in zip(u.tolist(), v.tolist())]
    assert hop_distances(u, v, own_u, own_v, nodes, clip).tolist() == expected


def test_a_pools_hops_type_every_edge_of_the_union_by_the_samples_own_graph():
    rng = random.Random(5)
    pool = GraphPool("full+edges", "causal", "full", edge_types={"enc": "hops:3"})
    graphs = [nx.gnm_random_graph(n + 1, n, seed=n) for n in (6, 9)]  # n tokens and </s>
    for g in graphs:
        g.add_edges_from((i, i) for i in g)  # every query its own key
    batch = make_batch(pool, [[5] * 6, [5] * 9], [[rng.randint(3, 9)]] * 2, edges=graphs)
    types, first = typed_edges(batch.relation(ENC)), 0
    for g in graphs:
        lengths = dict(nx.all_pairs_shortest_path_length(g))
        for a in g:
            for b in g:  # full attention: every pair is an edge
                assert types[(first + a, first + b)] == min(lengths[a].get(b, 4), 4)
        first += len(g)


def test_given_types_and_features_from_python_pattern_edges_unlisted():
    pool = GraphPool("window:1+edges", edge_types={"enc": "given:3,2"})
    triples = [(0, 1), (2, 0)]
    first = (torch.tensor([0, 2]), torch.tensor([1, 0]), torch.tensor([2, 1]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    star = nx.Graph()
    star.add_edge(0, 2, type=0, features=[5.0, 6.0])
    batch = make_batch(pool, [[5, 6], [7, 8]], [[5], [6]], edges=[first, star])
    relation = batch.relation(ENC)
    types, features = typed_edges(relation), relation.edge_features
    rows = {pair: features[i].tolist() for i, pair in enumerate(zip(relation.u.tolist(), relation.v.tolist()))}
    assert types[triples[0]] == 2 and types[triples[1]] == 1 and rows[(2, 0)] == [3.0, 4.0]
    assert types[(3, 5)] == 0 and types[(5, 3)] == 0 and rows[(5, 3)] == [5.0, 6.0]  # undirected: both ways
    assert types[(0, 0)] == 3 and rows[(0, 0)] == [0.0, 0.0]  # a window edge no sample lists: unlisted
    assert pool.edge_types[ENC].num_types == 4 and pool.edge_types[ENC].names[-1] == "unlisted"
    plain = make_batch(GraphPool("window:1+edges", edge_types={"enc": "given:3"}), [[5, 6]], [[5]], edges=[[(0, 2, 1)]])
    assert typed_edges(plain.relation(ENC))[(0, 2)] == 1 and plain.relation(ENC).edge_features is None


@pytest.mark.parametrize(
    "spec,edges,named",
    [
        (
            "given:3",
            [[(0, 1, 3)], [(0, 1, 0)]],
            "sample 0, enc attention: edge 0-1 has type 3, outside the declared types 0..2",
        ),
        ("given:3", [[(0, 1, 0)], [(0, 1)]], "sample 1, enc attention: its edges carry no types"),
        (
            "given:3,2",
            [[(0, 1, 0)], [(0, 1, 0)]],
            "sample 0, enc attention: its edge features have none, but given:3,2 declares 2",
        ),
        (
            "given:3",
            [
                (torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), torch.ones(1, 2)),
                (torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), torch.ones(1, 3)),
            ],
            "sample 1, enc attention: edge features of width 3, but sample 0's have width 2",
        ),
        (
            "given:3",
            [[(0, 1, 0)], (torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), torch.ones(1, 3))],
            "sample 1, enc attention: edge features of width 3, but sample 0's have none",
        ),
        ("given:3", [[(0, 1, 0)], [(0, 1, 0), (1, 0)]], "sample edges are (u, v) tensors"),
    ],
)
def test_bad_given_types_from_python_name_the_sample(spec, edges, named):
    pool = GraphPool("window:1+edges", edge_types={"enc": spec})
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        make_batch(pool, [[5, 6], [7, 8]], [[5], [6]], edges=edges)


def test_networkx_types_on_some_edges_only_are_refused():
    graph = nx.DiGraph()
    graph.add_edge(0, 1, type=1)
    graph.add_edge(1, 0)
    with pytest.raises(ValueError, match=r"edge \(1, 0\) of the networkx graph has no 'type'"):
        make_batch(GraphPool("window:1+edges", edge_types={"enc": "given:2"}), [[5, 6]], [[5]], edges=[graph])


@pytest.mark.parametrize(
    "kwargs,error,named",
    [
        ({"dec": "causal+edges", "edge_types": {"dec": "role"}}, ConfigError, "tree roles type the encoder's edges"),
        ({"edge_types": {"enc": "hops:2"}}, ConfigError, "hops count steps in a self-attention's own sample edges"),
        ({"enc": "parse-tree", "edge_types": {"enc": "given:2"}}, ConfigError, "given types come with the edges"),
        ({"edge_types": {"enc": "relative:4"}}, UserError, "derived from positions where attention runs"),
        ({"edge_types": {"enc": "rol"}}, UserError, "unknown edge type 'rol' (did you mean role?)"),
        ({"edge_types": {"enc": "hops"}}, UserError, "hops takes 1 integer argument"),
        ({"edge_types": {"enc": "hops:x"}}, UserError, "arguments must be integers"),
        ({"edge_types": {"encoder": "role"}}, ConfigError, "names the relation 'encoder'; give enc, dec or cross"),
    ],
)
def test_a_pool_refuses_an_edge_type_its_relation_cannot_carry(kwargs, error, named):
    with pytest.raises(error) as err:
        GraphPool(**kwargs)
    assert named in str(err.value)


def test_a_length_pattern_alone_takes_roles_once_per_length():
    pool = GraphPool("window:1", targets=False, cls_node=True, edge_types={"enc": "role"})
    batch = make_batch(pool, [[5, 6], [5, 6]], [[4], [4]])
    types = {pair: ROLES[t] for pair, t in typed_edges(batch.relation(ENC)).items()}
    assert types[(1, 2)] == "other" and types[(3, 0)] == "eos-token" and types[(0, 2)] == "cls-token"
    assert types[(5, 6)] == "other" and types[(7, 4)] == "eos-token" and len(pool.graph) == 1


def test_act_active_subgraphs_keep_each_edges_type():
    words = "[MAX 2 9 [MIN 4 7 ] 0 ]".split()
    pool = GraphPool("window:2+parse-tree", targets=False, edge_types={"enc": "role"})
    batch = make_batch(pool, [[5] * len(words)] * 2, [[4]] * 2, edges=[parse_tree(words)] * 2)
    relation = batch.relation(ENC)
    active = torch.rand(relation.num_queries, generator=torch.Generator().manual_seed(0)) < 0.5
    kept = relation.restrict_to_destinations(active)
    query_of = active.nonzero()[:, 0]  # kept query i was query query_of[i]
    before = typed_edges(relation)
    after = {(a, int(query_of[b])): t for (a, b), t in typed_edges(kept).items()}
    assert after == {(a, b): t for (a, b), t in before.items() if active[b]}
    assert len(after) > 0 and len(after) < len(before)


def test_attention_adds_each_edges_role_bias_as_a_dense_reference_does():
    """The pool's types reach attention: torch's edge-wise softmax with a per-role, per-head bias
    equals a dense float64 masked softmax whose scores add table[role(key, query), head]."""
    from graphformer import graph_attention
    from graphformer.attention.bias import EdgeBias

    words = "[MAX 2 9 [MIN 4 7 ] 0 ]".split()
    pool = GraphPool("window:1+parse-tree", targets=False, cls_node=True, edge_types={"enc": "role"})
    relation = make_batch(pool, [[5] * len(words)], [[4]], edges=[parse_tree(words)]).relation(ENC)
    nodes, heads, d = relation.num_queries, 2, 4
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(nodes, heads, d, generator=generator, dtype=torch.float64) for _ in range(3))
    table = torch.randn(len(ROLES), heads, generator=generator, dtype=torch.float64)
    got = graph_attention(relation, q, k, v, backend="torch", bias=EdgeBias(pool.edge_types[ENC], table=table))
    scores = torch.full((heads, nodes, nodes), float("-inf"), dtype=torch.float64)
    for (key, query), role in typed_edges(relation).items():
        scores[:, query, key] = (q[query] * k[key]).sum(-1) / d**0.5 + table[role]
    expected = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    torch.testing.assert_close(got, expected)


def test_a_dgl_graph_of_the_batch_carries_the_types_as_edge_data():
    from helpers import import_dgl

    import_dgl()
    words = "[MAX 2 [MIN 4 ] ]".split()
    pool = GraphPool("window:1+parse-tree", targets=False, edge_types={"enc": "role"})
    batch = make_batch(pool, [[5] * len(words)], [[4]], edges=[parse_tree(words)])
    graph = batch.dgl_graph()
    u, v = graph.edges(etype="enc")
    assert torch.equal(u, batch.relation(ENC).u) and torch.equal(v, batch.relation(ENC).v)
    assert torch.equal(graph.edges["enc"].data["types"], batch.relation(ENC).edge_types)
