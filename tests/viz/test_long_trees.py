"""A long sample's own tree drawn from its edges (`graphformer.viz.long_tree`): ListOps at about
2,000 tokens on its parse tree, through ``heatmap --view graph|both`` on a ``--viz-every``
recording and ``attend --show rollout``; its rows checked against a breadth-first search of the
parse tree written here, its edges and widths against the recorded weights."""

import tracemalloc
from collections import deque

import numpy as np
import pytest
from helpers import long_listops_data, train_tiny
from matplotlib.collections import LineCollection, PathCollection
from PIL import Image

import graphformer.viz
from graphformer.cli import main
from graphformer.graphs.sample_edges import parse_tree
from graphformer.viz import long_tree, plots
from graphformer.viz.recording import load_records, picture, recorded_maps
from graphformer.viz.rollout_views import draw_rolled

MAX_PNG_BYTES = 4_000_000
MAX_PNG_PIXELS_WIDE = int((long_tree.MAX_WIDTH + 8) * 120)  # the tree, a heatmap and colour bars, at 120 dpi
THRESHOLD = 0.02  # draw_tree's default: weights above 2 % of the largest are drawn


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory):
    """A tiny encoder classifier attending along each sample's parse tree alone, trained one epoch
    on short ListOps with ``--viz-every``, whose first validation sample, the one recorded, is an
    expression of about 2,000 tokens (as test_long_inputs' fixture); and that expression."""
    root = tmp_path_factory.mktemp("long-tree")
    data, long = long_listops_data(root / "data")
    options = ["--task", "listops", "--model", "encoder", "--enc-attention", "parse-tree", "--positions", "none"]
    return train_tiny(data, root / "run", *options, "--pooling", "last", "--epochs", "1", "--viz-every", "1"), long


def bfs_depths(words) -> list[int]:
    """Independently: the edges between each node and </s> (the last node) on the parse tree."""
    u, v = parse_tree(words)
    linked = {node: set() for node in range(len(words) + 1)}
    for a, b in zip(u.tolist(), v.tolist()):
        linked[a].add(b)
        linked[b].add(a)
    depth, queue = {len(words): 0}, deque([len(words)])
    while queue:
        node = queue.popleft()
        for other in sorted(linked[node] - depth.keys()):
            depth[other] = depth[node] + 1
            queue.append(other)
    return [depth[node] for node in range(len(words) + 1)]


def tree_axes(figure, title: str):
    (ax,) = [ax for ax in figure.axes if title in ax.get_title()]
    lines = next(c for c in ax.collections if isinstance(c, LineCollection))
    nodes = next(c for c in ax.collections if isinstance(c, PathCollection))
    return ax, lines, nodes


def assert_small_png(path):
    with Image.open(path) as image:
        width = image.size[0]
    assert path.stat().st_size < MAX_PNG_BYTES and 0 < width <= MAX_PNG_PIXELS_WIDE


def test_the_tree_view_of_a_2000_token_recording_draws_through_the_command_line(tree_run, tmp_path):
    run, long = tree_run
    for view in ("graph", "both"):
        png = tmp_path / f"{view}.png"
        assert main(["heatmap", str(run), "--view", view, "--head", "all", "-o", str(png)]) == 0
        assert_small_png(png)
    gif = tmp_path / "tree.gif"
    assert main(["animate", str(run), "--view", "graph", "-o", str(gif)]) == 0 and gif.stat().st_size > 0


def test_nodes_sit_in_reading_order_at_their_depth_below_eos(tree_run):
    run, long = tree_run
    record = load_records(run)[-1]
    ax, _, nodes = tree_axes(plots.draw(picture(record, head=0), view="graph"), "on its tree")
    xy = nodes.get_offsets()
    words = long.split()
    named = [text.get_text() for text in ax.texts]
    assert named[0] == words[0] and 1 < len(named) < 40 and all(name.startswith("[") for name in named)  # operators
    assert len(words) >= 1990 and max(bfs_depths(words)) >= 8
    np.testing.assert_array_equal(xy[:, 0], np.arange(len(words) + 1))
    np.testing.assert_array_equal(-xy[:, 1], bfs_depths(words))


def test_the_drawn_edges_are_the_trees_above_the_threshold_wider_as_they_weigh_more(tree_run):
    run, long = tree_run
    record = load_records(run)[-1]
    enc = recorded_maps(record)["enc"]
    u, v = parse_tree(long.split())
    assert set(zip(enc.queries.tolist(), enc.keys.tolist())) == set(zip(v.tolist(), u.tolist()))  # the tree alone
    weights = dict(zip(zip(enc.queries.tolist(), enc.keys.tolist()), enc.weights[-1, 1].tolist()))
    _, lines, _ = tree_axes(plots.draw(picture(record, head=1), view="graph"), "on its tree")
    segments = np.array(lines.get_segments())  # (E, 2, 2): from the query to the middle of its edge
    queries = segments[:, 0, 0].round().astype(int)
    keys = (2 * segments[:, 1, 0] - segments[:, 0, 0]).round().astype(int)
    drawn = dict(zip(zip(queries.tolist(), keys.tolist()), lines.get_linewidths()))
    above = {pair for pair, w in weights.items() if pair[0] != pair[1] and w > THRESHOLD}
    assert len(drawn) == len(segments) and set(drawn) == above and len(above) > 1000
    order = sorted(drawn, key=weights.get)
    widths = np.array([drawn[pair] for pair in order])
    assert np.all(np.diff(widths) >= 0) and widths[-1] > widths[0]


def test_the_tree_view_allocates_no_nodes_by_nodes_array(tree_run):
    run, long = tree_run
    record = load_records(run)[-1]
    nodes = len(long.split()) + 1
    tracemalloc.start()
    try:
        # The picture from the recording, and every artist of its figure: the pixels' buffer,
        # sized by the capped figure, not by the nodes, is the renderer's when it is saved.
        figure = plots.draw(picture(record, head="all"), view="graph")
        blocks = [trace.size for trace in tracemalloc.take_snapshot().traces]
    finally:
        tracemalloc.stop()
    # Every array made holds fewer bytes than even a bool nodes x nodes one (float32 takes 4 n^2).
    assert len(figure.axes) == 2 * 4 and 0 < max(blocks) < nodes * nodes


def test_the_rollout_panel_colours_each_node_of_the_tree_by_its_share(tree_run, tmp_path):
    run, long = tree_run
    png = tmp_path / "rollout.png"
    assert main(["attend", str(run), "--show", "rollout", "--input", long, "--beam", "1", "-o", str(png)]) == 0
    assert_small_png(png)
    (rolled,) = graphformer.viz.draw_rollout(run, [long], beam=1)
    words = long.split()
    assert rolled.query == len(words)  # </s>, where the parse tree joins its root
    ax, lines, nodes = tree_axes(draw_rolled(rolled), "on the sample's tree")
    row = rolled.shares[rolled.rows.index(rolled.query)]
    np.testing.assert_array_equal(np.asarray(nodes.get_array()), row)
    np.testing.assert_array_equal(-nodes.get_offsets()[:, 1], bfs_depths(words))
    assert nodes.norm.vmax == pytest.approx(float(np.delete(row, rolled.query).max()))  # the query's own aside
    assert len(lines.get_segments()) == len(words)  # the tree's edges, each once: a parent per token
    assert "reaching node" in ax.get_title() and f"{len(words) + 1:,} nodes" in ax.get_xlabel()
