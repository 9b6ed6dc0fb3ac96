"""How far information travels through a pattern (graphformer.graphs.reach), against networkx."""

import networkx as nx
import pytest

from graphformer.graphs import ENC, GraphPool
from graphformer.graphs.reach import meeting_share, readout_node


def networkx_meeting_share(pool, n_tokens, layers, readout=None):
    """The same question by breadth-first search: nodes within ``layers`` edges of the query (only
    the readout node, if given), then every token within ``layers`` edges of one of them."""
    graph = pool.graph(pool.source_positions(n_tokens), 0)
    keys, queries = graph.edges(etype=ENC)
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.num_nodes("src")))
    g.add_edges_from(zip(keys.tolist(), queries.tolist()))
    first = int(pool.cls_node)
    query = first + n_tokens - 1
    heard_query = nx.single_source_shortest_path_length(g, query, cutoff=layers)
    if readout is not None:
        heard_query = [readout] if readout in heard_query else []
    met = set()
    for u in heard_query:
        met |= set(nx.single_source_shortest_path_length(g.reverse(copy=False), u, cutoff=layers))
    return sum(j in met for j in range(first, query)) / (n_tokens - 1)


@pytest.mark.parametrize(
    "spec",
    ["window:3", "dilated:2,3", "block:8", "window:1+random:3", "window:2+global:1", "full", "window:1+dilated:4,8"],
)
@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("cls_node", [False, True])
def test_meeting_share_equals_a_breadth_first_search(spec, layers, cls_node):
    pool = GraphPool(spec, targets=False, cls_node=cls_node)
    assert meeting_share(pool, 60, layers) == pytest.approx(networkx_meeting_share(pool, 60, layers), abs=1e-6)


@pytest.mark.parametrize("spec", ["window:3", "block:8", "window:1+random:3", "window:2+global:1"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("pooling", ["cls", "last"])
def test_meeting_in_the_readout_node_equals_a_breadth_first_search(spec, layers, pooling):
    pool = GraphPool(spec, targets=False, cls_node=pooling == "cls")
    node = readout_node(pool, 60, pooling)
    assert meeting_share(pool, 60, layers, node) == pytest.approx(
        networkx_meeting_share(pool, 60, layers, node), abs=1e-6
    )


def test_the_readout_node_is_the_cls_node_or_the_end_of_sentence_node():
    pool = GraphPool("window:1", targets=False)
    graph = pool.graph(pool.source_positions(10), 0)
    assert readout_node(pool, 10, "last") == 10 == graph.num_nodes("src") - 1  # tokens 0..9, then </s>
    assert readout_node(GraphPool("window:1", targets=False, cls_node=True), 10, "cls") == 0
    assert readout_node(pool, 10, "mean") is None


def test_a_window_read_at_the_end_hears_half_of_what_meets_anywhere():
    """window:w, l layers: </s> hears the l * w tokens before it (the query among them), while
    the query meets tokens up to 2 l w back somewhere in the middle."""
    n, w, layers = 200, 4, 2
    pool = GraphPool(f"window:{w}", targets=False)
    assert meeting_share(pool, n, layers, readout_node(pool, n, "last")) == pytest.approx(
        (layers * w - 1) / (n - 1), abs=1e-6
    )  # l w nodes before </s>: the query and l w - 1 tokens
    assert meeting_share(pool, n, layers) == pytest.approx(2 * layers * w / (n - 1), abs=1e-6)


@pytest.mark.parametrize("w, layers", [(4, 1), (4, 2), (8, 3)])
def test_a_window_lets_the_query_meet_tokens_within_twice_its_reach(w, layers):
    """Node u hears [u - lw, u + lw]: the query and token j meet iff they are within 2lw."""
    n = 200
    share = meeting_share(GraphPool(f"window:{w}", targets=False), n, layers)
    assert share == pytest.approx(min(2 * layers * w, n - 1) / (n - 1), abs=1e-6)


def test_a_cls_node_or_a_tree_joins_every_pair_in_one_layer():
    assert meeting_share(GraphPool("block:4", targets=False, cls_node=True), 300, 1) == 1.0
    assert meeting_share(GraphPool("tree:1", targets=False), 300, 1) == 1.0  # spans hear their tokens first
    assert meeting_share(GraphPool("block:4", targets=False), 300, 5) == pytest.approx(3 / 299, abs=1e-6)
