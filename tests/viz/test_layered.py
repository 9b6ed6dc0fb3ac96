"""A sample's own graph drawn as that graph: a parse tree laid out as a tree."""

import numpy as np
import torch
from matplotlib.collections import LineCollection, PathCollection

from graphformer.graphs.sample_edges import parse_tree
from graphformer.viz.layered import depths
from graphformer.viz.plots import AttentionPicture, draw
from graphformer.viz.recording import picture

WORDS = "[MAX 2 [MIN 4 [SM 1 2 ] ] 0 ]".split()


def tree_map(words, seed=0):
    """A (N, N) map on the parse tree's edges with random weights that sum to one per query."""
    u, v = parse_tree(words)
    n = len(words) + 1
    weights = np.full((n, n), np.nan)
    weights[v.numpy(), u.numpy()] = np.random.default_rng(seed).random(len(u))
    return weights / np.nansum(weights, axis=1, keepdims=True)


def nesting_depth(words):
    """Independently: 1 + the operators still open before each token (a closer counts its own),
    and 0 for </s>."""
    depth, open_ops = [], 0
    for word in words:
        if word == "]":
            depth.append(open_ops + 1)
            open_ops -= 1
        else:
            depth.append(open_ops + 1)
            open_ops += word.startswith("[")
    return depth + [0]


def test_nodes_sit_one_row_per_level_of_the_tree():
    assert depths(tree_map(WORDS)).tolist() == nesting_depth(WORDS)


def test_a_tree_picture_draws_every_edge_in_two_halves_at_its_nodes_rows():
    weights = tree_map(WORDS)
    tokens = WORDS + ["</s>"]
    pic = AttentionPicture(weights[None], tokens, tokens, ["head 0"], layout="tree")
    figure = draw(pic, view="graph")
    (ax,) = [a for a in figure.axes if a.collections]
    halves = next(c for c in ax.collections if isinstance(c, LineCollection)).get_segments()
    nodes = next(c for c in ax.collections if isinstance(c, PathCollection)).get_offsets()
    shown = (np.nan_to_num(weights) > 0.02) & ~np.eye(len(tokens), dtype=bool)
    assert len(halves) == shown.sum()  # one half per (query, key) weight, self-loops aside
    rows = max(nesting_depth(WORDS))
    np.testing.assert_allclose(nodes[:, 1], 1 - np.array(nesting_depth(WORDS)) / rows)
    for half in halves:  # from a node to the middle of its edge
        assert any(np.allclose(half[0], node) for node in nodes)


def test_a_recorded_relation_with_sample_edges_is_drawn_as_a_tree():
    tokens = WORDS + ["</s>"]
    maps = torch.tensor(tree_map(WORDS))[None, None]  # (layers, heads, queries, keys)
    record = {"epoch": 1, "src_labels": tokens, "enc_labels": tokens, "maps": {"enc": maps}}
    assert picture(record, "enc").layout == "bipartite"  # recorded before sample graphs were known
    record["sample_graphs"] = ["enc"]
    assert picture(record, "enc").layout == "tree"
