"""Pictures a newcomer can read: no text falls off the figure, one title per figure, trees sized
to their shape with readable tokens."""

import numpy as np
import pytest
from test_layered import tree_map

from graphformer.viz.plots import SCALES, VIEWS, AttentionPicture, draw
from graphformer.viz.recording import picture

QUERY_AXIS = "queries: decoder inputs <s>, y1, ..."


def copy_picture(heads, keys, queries, seed=0, letters=False):
    """A cross-attention picture of ``keys`` source tokens and ``queries`` decoder inputs: words
    ``w0``, ``w1``, ..., or with ``letters`` the copy task's one-letter tokens."""
    weights = np.random.default_rng(seed).random((heads, queries, keys)) ** 8

    def token(i):
        return chr(ord("a") + i % 26) if letters else f"w{i}"

    return AttentionPicture(
        weights / weights.sum(-1, keepdims=True),
        [token(i) for i in range(keys - 1)] + ["</s>"],
        ["<s>"] + [token(i) for i in range(queries - 1)],
        [f"head {h}" for h in range(heads)],
        "cross layer 2 of 2, epoch 8",
        "keys: source tokens",
        QUERY_AXIS,
    )


def texts_outside(figure):
    """What of ``figure`` (a panel's ticks, names and title; its texts; a legend; the figure's
    title), once drawn, reaches past the figure's edge by more than a pixel: the titles of the
    panels whose text does, and "legend" or "title"."""
    figure.canvas.draw()
    renderer, edge = figure.canvas.get_renderer(), figure.bbox
    boxes = [("title", figure._suptitle.get_window_extent(renderer))]
    boxes += [("legend", legend.get_window_extent(renderer)) for legend in figure.legends]
    for ax in figure.axes:
        name = ax.get_title() or ax.get_label()
        boxes.append((name, ax.get_tightbbox(renderer)))  # what is drawn of it, in the layout
        boxes += [(name, text.get_window_extent(renderer)) for text in ax.texts]  # and beside it
    return sorted(
        {
            name
            for name, box in boxes
            if box.x0 < edge.x0 - 1 or box.y0 < edge.y0 - 1 or box.x1 > edge.x1 + 1 or box.y1 > edge.y1 + 1
        }
    )


# short and long axes, one panel and grids of heads; 16 one-letter tokens a side is the recorded
# copy frame whose query name fell off the left edge
@pytest.mark.parametrize(
    "heads,keys,queries,letters",
    [(1, 2, 1, False), (1, 3, 2, False), (1, 16, 16, True), (1, 60, 3, False), (4, 12, 12, False), (2, 90, 90, True)],
)
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("scale", SCALES)
def test_no_text_falls_off_the_figure(heads, keys, queries, view, scale, letters):
    figure = draw(copy_picture(heads, keys, queries, letters=letters), view, scale)
    assert texts_outside(figure) == []


def test_the_query_name_breaks_onto_two_lines_only_where_it_is_taller_than_its_panel():
    short, tall = draw(copy_picture(1, 3, 2)), draw(copy_picture(1, 20, 20))
    (short_ax,), (tall_ax,) = (
        [ax for ax in f.axes if ax.images and ax.get_label() != "<colorbar>"] for f in (short, tall)
    )
    assert short_ax.get_ylabel() == "queries:\ndecoder inputs <s>, y1, ..."
    assert tall_ax.get_ylabel() == QUERY_AXIS


def _record(heads=4):
    import torch

    return {
        "epoch": 8,
        "src_labels": ["a", "b", "</s>"],
        "tgt_labels": ["<s>", "a", "b"],
        "maps": {"cross": torch.rand(2, heads, 3, 3)},
    }


@pytest.mark.parametrize("head", [0, 3, "all"])
def test_panel_titles_do_not_repeat_the_figure_title(head):
    figure = draw(picture(_record(), "cross", -1, head), view="both")
    title = figure._suptitle.get_text()
    assert title == "cross layer 2 of 2, epoch 8"
    panel_titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert panel_titles and all(t.startswith("head ") for t in panel_titles)
    assert not any(t in title or title in t for t in panel_titles)


def tree_picture(words, heads=1):
    tokens = words + ["</s>"]
    maps = np.stack([tree_map(words, seed) for seed in range(heads)])
    return AttentionPicture(
        maps, tokens, tokens, [f"head {h}" for h in range(heads)], "enc layer 1 of 1", layout="tree"
    )


SHALLOW = "[MAX 2 9 ]".split()
WIDE = "[MAX 2 9 4 1 7 3 8 0 5 6 2 ]".split()
DEEP = "[MAX 2 [MIN 4 [SM 1 [MED 3 [MAX 2 5 ] ] ] ] 0 ]".split()


def test_a_tree_figure_grows_with_the_trees_width_and_depth():
    shallow, wide, deep = (draw(tree_picture(w), view="graph").get_size_inches() for w in (SHALLOW, WIDE, DEEP))
    assert wide[0] > shallow[0] + 8 * 0.15  # 9 nodes more, at least the narrowest spacing each
    assert deep[1] > shallow[1] + 4 * 0.35  # 4 rows more, each at least a row's gap taller
    assert wide[1] == pytest.approx(shallow[1])  # as deep: as tall


@pytest.mark.parametrize("words", [SHALLOW, WIDE, DEEP])
def test_a_tree_fills_its_panel_with_readable_tokens_clear_of_the_next_row(words):
    figure = draw(tree_picture(words, heads=2), view="graph")
    assert texts_outside(figure) == []
    for ax in (ax for ax in figure.axes if ax.texts):
        tokens = [t.get_window_extent() for t in ax.texts]
        nodes = ax.transData.transform(ax.collections[1].get_offsets())
        assert min(t.get_fontsize() for t in ax.texts) >= 9
        box = ax.get_window_extent()
        # the drawing spans the panel: the deepest tokens end at its bottom, the top row at its top
        assert min(t.y0 for t in tokens) - box.y0 < 0.1 * figure.dpi
        assert box.y1 - max(nodes[:, 1]) < 0.15 * figure.dpi
        # each token hangs below its own node, above every node of a lower row
        for token, (x, y) in zip(tokens, nodes):
            assert token.y1 < y and token.x0 < x < token.x1
            lower = nodes[nodes[:, 1] < y - 1, 1]
            assert not len(lower) or token.y0 > lower.max()
