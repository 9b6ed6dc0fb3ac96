"""Per-sample attention edges: the parse tree, the edges file, edges from Python, their refusals,
and every backend against a dense masked softmax on random per-sample graphs."""

import random
import re

import networkx as nx
import pytest
import torch
from helpers import backends, why_not

from graphformer import graph_attention
from graphformer.attention import BACKENDS
from graphformer.errors import ConfigError, UserError
from graphformer.graphs import CROSS, DEC, ENC, GraphPool, make_batch
from graphformer.graphs.sample_edges import derive, operands, parse_pairs, parse_tree, read_edges_file, split_spec


def pairs_of(u, v):
    return set(zip(u.tolist(), v.tolist()))


def operator_of(words):
    """An independent reading of the tree: the operator that holds each token (None at top
    level; a closer's is the operator it closes), found by counting brackets backwards."""
    holder = []
    for i in range(len(words)):
        unmatched, found = 0, None
        for j in range(i - 1, -1, -1):
            if words[j] == "]":
                unmatched += 1
            elif words[j].startswith("["):
                if unmatched == 0:
                    found = j
                    break
                unmatched -= 1
        holder.append(found)
    return holder


def test_the_parse_tree_joins_each_token_and_its_operator_both_ways():
    words = "[MAX 2 9 [MIN 4 7 ] 0 ]".split()
    edges = pairs_of(*parse_tree(words))
    eos = len(words)
    expected = {(i, i) for i in range(eos + 1)}
    for i, op in enumerate(operator_of(words)):
        parent = eos if op is None else op
        expected |= {(i, parent), (parent, i)}
    assert edges == expected
    assert (3, 4) in edges and (0, 4) not in edges  # 4 is MIN's argument, not MAX's


def test_the_parse_tree_of_generated_listops_matches_the_independent_reading():
    from graphformer.data.listops import generate_listops

    for source, _ in generate_listops(5, random.Random(1), min_length=20, max_length=60):
        words = source.split()
        eos = len(words)
        expected = {(i, i) for i in range(eos + 1)}
        for i, op in enumerate(operator_of(words)):
            parent = eos if op is None else op
            expected |= {(i, parent), (parent, i)}
        assert pairs_of(*parse_tree(words)) == expected


@pytest.mark.parametrize(
    "words,where", [("[MAX 1 2 ] ]", "token 4"), ("[MAX 1 [MIN 2 3 ]", "token 0"), ("] 1", "token 0")]
)
def test_unbalanced_expressions_are_refused_naming_sample_and_token(words, where):
    with pytest.raises(UserError, match=rf"sample 7 .*{where}"):
        derive("parse-tree", words.split(), sample=7)


def test_operands_gives_target_position_t_digit_t_of_each_number_and_the_plus():
    from graphformer.data.synthetic import generate_pairs

    for source, total in generate_pairs("addition", 20, random.Random(3), span=(3, 30)):
        words = source.split()
        first, second = source.split(" + ")  # an independent reading: the two numbers' digits
        a, b = first.split(), second.split()
        plus, queries = len(a), len(total.split()) + 1  # decoder nodes: <s> and the sum's digits
        pattern = operands(words)
        u, v = pattern(len(words) + 1, queries)
        expected = {(plus, t) for t in range(queries)}
        expected |= {(t, t) for t in range(min(len(a), queries))}
        expected |= {(plus + 1 + t, t) for t in range(min(len(b), queries))}
        assert pairs_of(u, v) == expected
        assert all(words[i] == a[j] for i, j in expected if i < plus)
        assert all(words[i] == b[j] for i, j in expected if i > plus)
        shorter = pairs_of(*pattern(len(words) + 1, queries - 1))  # prefix-stable: decoding sees these
        assert shorter == {(i, j) for i, j in expected if j < queries - 1}


@pytest.mark.parametrize(
    "words,why", [("1 2 3", "0 '+' tokens"), ("1 + 2 + 3", "2 '+' tokens"), ("+ 1", "an operand is empty")]
)
def test_a_source_that_is_not_one_sum_is_refused_naming_the_sample(words, why):
    with pytest.raises(UserError, match=re.escape("sample 2 is not two operands joined by '+' (operands): ")) as err:
        derive("operands", words.split(), sample=2)
    assert why in str(err.value)


@pytest.mark.parametrize(
    "patterns,option",
    [
        (dict(enc="operands"), "enc_attention"),
        (dict(dec="causal+operands"), "dec_attention"),
        (dict(cross="parse-tree"), "cross_attention"),
    ],
)
def test_a_derived_structure_serves_its_own_sublayer_only(patterns, option):
    with pytest.raises(ConfigError) as err:
        GraphPool(**patterns)
    assert option in str(err.value) and "only" in str(err.value)


def test_specs_split_into_length_and_sample_terms():
    assert split_spec("window:1+parse-tree") == ("window:1", "parse-tree")
    assert split_spec("edges") == (None, "edges")
    assert split_spec("full") == ("full", None)
    with pytest.raises(UserError, match="one sample term"):
        split_spec("parse-tree+edges")


def test_edges_file_lines_are_read_and_checked(tmp_path):
    path = tmp_path / "train.enc.edges"
    path.write_text("0-1 1-0\n\n2-2\n")
    joined = GraphPool("window:1+edges")  # the window gives every query a key: an empty line is fine
    edges = read_edges_file(path, joined, ENC, [(3, 1), (2, 1), (3, 1)])
    assert [pairs_of(*e) for e in edges] == [{(0, 1), (1, 0)}, set(), {(2, 2)}]
    causal = GraphPool("full", "causal+edges")
    for text, pool, etype, named in [
        ("0-1\n", joined, ENC, "1 lines but its data has 2 samples"),
        ("0-1\n1_0\n", joined, ENC, "line 2: '1_0' is not a key-query pair"),
        ("0-1\n1-\u00b2\n", joined, ENC, "line 2: '1-\u00b2' is not a key-query pair"),  # a digit, not ASCII
        ("0-1\n0-3\n", joined, ENC, "line 2: edge 0-3 is outside the sample"),
        ("0-1\n0-" + "9" * 30 + "\n", joined, ENC, "line 2: '0-9{30}' names a position past any sample"),
        ("0-0 1-1 2-2\n0-0 2-2\n", GraphPool("edges"), ENC, "line 2: query 1 has no key"),
        ("0-1\n2-1\n", causal, DEC, "line 2: edge 2-1 lets a decoder position read a later one"),
    ]:
        path.write_text(text)
        with pytest.raises(UserError, match=named) as err:
            read_edges_file(path, pool, etype, [(3, 3), (3, 3)])  # two samples of two tokens each
        assert str(path) in str(err.value)
    assert pairs_of(*parse_pairs(" 3-7  0-0 ")) == {(3, 7), (0, 0)}


def test_edges_files_are_read_as_the_data_is(tmp_path):
    """One reader for every text file: a byte-order mark is dropped, as from a .src; a byte that is
    not UTF-8 is refused with the file and the line."""
    path, pool = tmp_path / "valid.enc.edges", GraphPool("edges")
    path.write_bytes(b"\xef\xbb\xbf0-0 1-1\r\n1-0 0-1\n")
    assert [pairs_of(*e) for e in read_edges_file(path, pool, ENC, [(2, 1), (2, 1)])] == [
        {(0, 0), (1, 1)},
        {(1, 0), (0, 1)},
    ]
    path.write_bytes(b"0-0 1-1\n1-0 0-1 \xff\n")
    with pytest.raises(UserError, match=re.escape(f"{path}: line 2 is not valid UTF-8")):
        read_edges_file(path, pool, ENC, [(2, 1), (2, 1)])


def test_sample_edges_join_the_length_pattern_and_are_not_cached():
    pool = GraphPool("window:1+edges")
    batch = make_batch(pool, [[4, 5, 6], [4, 5, 6]], [[5], [6]], edges=[[(0, 3)], [(3, 0)]])
    u, v = batch.graph.edges("enc")
    window = {(i, j) for j in range(4) for i in range(4) if abs(i - j) <= 1}
    first = {(a, b) for a, b in zip(u.tolist(), v.tolist()) if a < 4 and b < 4}
    second = {(a - 4, b - 4) for a, b in zip(u.tolist(), v.tolist()) if a >= 4}
    assert first == window | {(0, 3)} and second == window | {(3, 0)}
    assert len(pool.graph) == 1  # the length part, cached once; the joined graphs are not


def test_edges_come_as_pairs_tensors_networkx_a_mapping_or_a_function():
    pool = GraphPool("edges")
    star = nx.Graph([(0, 1), (0, 2), (0, 3)])
    star.add_edges_from((i, i) for i in range(4))
    loops = [(i, i) for i in range(4)]
    as_pairs = [(a, b) for a, b in star.edges()] + [(b, a) for a, b in star.edges()]
    given = [star, as_pairs, {"enc": (torch.tensor([a for a, _ in as_pairs]), torch.tensor([b for _, b in as_pairs]))}]
    graphs = [make_batch(pool, [[4, 5, 6]], edges=[e]).graph.edges("enc") for e in given]
    graphs.append(make_batch(pool, [[4, 5, 6]], edges=lambda tokens: as_pairs).graph.edges("enc"))
    for u, v in graphs:
        assert pairs_of(u, v) == set(as_pairs) | set(loops)


def test_refusals_name_the_sample_and_the_problem():
    pool = GraphPool("edges", "causal+edges", "full")
    entry = {"enc": [(i, i) for i in range(3)], "dec": [(0, 0), (0, 1)]}
    make_batch(pool, [[4, 5]], [[5]], edges=[entry])  # valid
    cases = [
        ({"enc": [(0, 0)], "dec": [(0, 1)]}, "sample 0, enc attention: query 1 has no key"),
        ({**entry, "dec": [(1, 0)]}, "sample 0, dec attention: edge 1-0 lets a decoder position read a later one"),
        ({**entry, "enc": [(0, 5)]}, "sample 0, enc attention: edge 0-5 is outside the sample"),
        ({"enc": entry["enc"]}, "sample 0 has no edges for the dec attention"),
        ({**entry, "cross": [(0, 0)]}, "sample 0: edges for 'cross', which takes none"),
        ({**entry, "enc": [(0.5, 1)]}, "node positions, whole numbers"),
    ]
    for edges, message in cases:
        with pytest.raises(ValueError, match=message):
            make_batch(pool, [[4, 5]], [[5]], edges=[edges])
    with pytest.raises(ValueError, match="no attention pattern of this pool takes them"):
        make_batch(GraphPool(), [[4, 5]], edges=[[(0, 0)]])
    with pytest.raises(ValueError, match="1 samples but 2 entries"):
        make_batch(pool, [[4, 5]], [[5]], edges=[entry, entry])


def test_a_classifier_pool_shifts_sample_positions_past_its_cls_node():
    pool = GraphPool("parse-tree", targets=False, cls_node=True)
    words = "[SM 1 2 ]".split()
    u, v = make_batch(pool, [[4, 5, 6, 7]], edges=[parse_tree(words)]).graph.edges("enc")
    tree = pairs_of(*parse_tree(words))
    cls = {(0, j) for j in range(6)} | {(i, 0) for i in range(6)}
    assert pairs_of(u, v) == cls | {(a + 1, b + 1) for a, b in tree}


def test_positions_around_a_cls_node_are_the_users_everywhere():
    """A pattern of the sample is called with the sample's positions (tokens and </s>, not <cls>),
    position -1 is outside the sample (not the <cls> node), and refusals quote the positions given."""
    pool = GraphPool("edges", targets=False, cls_node=True)
    asked = []

    def self_loops(keys, queries):
        asked.append((keys, queries))
        return torch.arange(queries), torch.arange(queries)

    u, v = make_batch(pool, [[4, 5, 6]], edges=[self_loops]).graph.edges("enc")
    assert asked == [(4, 4)]  # three tokens and </s>
    cls = {(0, j) for j in range(5)} | {(i, 0) for i in range(5)}
    assert pairs_of(u, v) == cls | {(i + 1, i + 1) for i in range(4)}
    for edges, message in [
        ([(-1, 0)], "sample 0, enc attention: edge -1-0 is outside the sample (4 key and 4 query positions)"),
        ([(3, 0), (4, 0)], "sample 0, enc attention: edge 4-0 is outside the sample"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            make_batch(pool, [[4, 5, 6]], edges=[edges])


def test_a_query_is_keyless_only_if_the_union_leaves_it_so():
    src, tgt = [[4, 5], [4, 5, 6]], [[5], [6, 7]]
    make_batch(GraphPool("window:1+edges"), src, tgt, edges=[[], []])
    make_batch(GraphPool("full", "causal", "edges"), src, tgt, edges=[[(0, 0), (1, 1)], [(2, 0), (0, 1), (3, 2)]])
    with pytest.raises(ValueError, match=re.escape("sample 1, cross attention: query 2 has no key")):
        make_batch(GraphPool("full", "causal", "edges"), src, tgt, edges=[[(0, 0), (1, 1)], [(2, 0), (0, 1)]])
    with pytest.raises(ValueError, match=re.escape("sample 0, enc attention: query 2 has no key")):
        make_batch(GraphPool("edges"), src, tgt, edges=[[(0, 0), (1, 1)], [(i, i) for i in range(4)]])


def random_sample_edges(n, m, rng):
    """A random graph per relation of one sample: each query keeps a random subset of its keys
    (at least one; the decoder's among the earlier positions)."""

    def pick(keys, queries, causal):
        pairs = []
        for q in range(queries):
            allowed = range(q + 1) if causal else range(keys)
            chosen = rng.sample(list(allowed), rng.randint(1, len(allowed)))
            pairs += [(k, q) for k in chosen]
        return pairs

    return {"enc": pick(n, n, False), "dec": pick(m, m, True), "cross": pick(n, m, False)}


def dense_masked(q, k, v, mask):
    """Per-head softmax attention over (queries, keys) ``mask``: the independent reference."""
    scores = torch.einsum("jhd,ihd->hji", q, k) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return torch.einsum("hji,ihd->jhd", weights, v)


@pytest.mark.parametrize("backend", backends(*sorted(BACKENDS)))
@pytest.mark.parametrize("etype", [ENC, DEC, CROSS])
def test_every_backend_equals_a_dense_masked_softmax_on_random_sample_graphs(backend, etype):
    rng = random.Random(3)
    src = [[4] * rng.randint(1, 9) for _ in range(6)]
    tgt = [[5] * rng.randint(1, 7) for _ in range(6)]
    edges = [random_sample_edges(len(s) + 1, len(t) + 1, rng) for s, t in zip(src, tgt)]
    batch = make_batch(GraphPool("edges", "edges", "edges"), src, tgt, edges=edges)
    relation = batch.relation(etype)
    exact = not why_not(backend, float64=True)  # flex computes in float32 at best
    dtype, tol = (torch.float64, 1e-12) if exact else (torch.float32, 1e-5)
    torch.manual_seed(0)
    q = torch.randn(relation.num_queries, 2, 4, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(relation.num_keys, 2, 4, dtype=dtype, requires_grad=True) for _ in range(2))
    mask = torch.zeros(relation.num_queries, relation.num_keys, dtype=torch.bool)
    mask[relation.v, relation.u] = True
    ref = dense_masked(q, k, v, mask)
    if why_not(backend, grad=True):  # forward only (flex on a CPU)
        with torch.no_grad():
            torch.testing.assert_close(graph_attention(relation, q, k, v, backend), ref.detach(), atol=tol, rtol=0)
        return
    out = graph_attention(relation, q, k, v, backend)
    torch.testing.assert_close(out, ref, atol=tol, rtol=0)
    grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v))
    for mine, theirs in zip(grads, torch.autograd.grad(ref.pow(2).sum(), (q, k, v))):
        torch.testing.assert_close(mine, theirs, atol=tol, rtol=0)
