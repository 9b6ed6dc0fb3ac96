"""How an attention picture is laid out, in inches: the size of each panel from its tokens and
its text, the grid of heads, and the figure that holds them (`layout`), for `plots.draw`.

A picture is laid out in inches, so its tokens' text keeps its size; its panels take the widest
token spacing, and the grid of them the rows, that keep it within MAX_WIDTH by MAX_HEIGHT,
which a screen shows without shrinking the text.
"""

from __future__ import annotations

import math

import numpy as np

from graphformer.viz import binned, bipartite, layered, text_sizes
from graphformer.viz.picture import AttentionPicture
from graphformer.viz.type_colours import TypeColours, legend_width

MAX_WIDTH = 16.5  # inches: about 2,000 px at save_figure's dpi
MAX_HEIGHT = 11.0
ASPECT = 1.5  # the width over height a grid of panels comes closest to
INCH_PER_TOKEN = 0.22  # between the rows, columns or positions of a panel: a token's line and a gap
MIN_INCH_PER_TOKEN = 0.15  # still room for a token's text: a picture too big at this spacing stays bigger
MIN_AXIS = 1.0  # inches: a heatmap of one or two tokens still has room for its colour bar's name
COLORBAR_WIDTH = 0.9
LEGEND_WIDTH = 1.2
LEGEND_HEIGHT = 0.6
TITLE_HEIGHT = 0.45  # the figure's title


def heatmap_size(picture: AttentionPicture, spacing: float) -> tuple[float, float]:
    """The (width, height) in inches of one heatmap panel: its cells, tokens ``spacing`` apart,
    with the tokens and the axis name beside them (left and below) and the title above."""
    beside = text_sizes.longest(picture.queries) + 2 * text_sizes.line_height(text_sizes.LABEL) + 0.3
    below = text_sizes.longest(picture.keys) + text_sizes.line_height(text_sizes.LABEL) + 0.3
    above = text_sizes.line_height(text_sizes.PANEL_TITLE) + 0.1
    cells_w = max(spacing * len(picture.keys), MIN_AXIS)
    cells_h = max(spacing * len(picture.queries), MIN_AXIS)
    return cells_w + beside, cells_h + below + above


def graph_size(picture: AttentionPicture, spacing: float) -> tuple[float, float]:
    """The (width, height) in inches of one graph panel, as its layout draws it."""
    if picture.layout == "tree":
        return layered.size(layered.depths(np.asarray(picture.maps[0], dtype=float)), picture.keys, spacing)
    return bipartite.size(picture.keys, picture.queries, picture.key_axis, picture.query_axis, spacing)


def panel_sizes(picture: AttentionPicture, kinds: list[str], scale: str, spacing: float) -> list[tuple[float, float]]:
    """The (width, height) in inches of each kind of panel of one head, tokens ``spacing`` apart."""
    own = scale == "per-head"  # then each panel carries its own colour bar or legend
    sizes = []
    for kind in kinds:
        width, height = heatmap_size(picture, spacing) if kind == "heatmap" else graph_size(picture, spacing)
        sizes.append((width + own * (COLORBAR_WIDTH if kind == "heatmap" else LEGEND_WIDTH), height))
    return sizes


def grid_shape(panels: int, width: float, height: float, room: float = MAX_WIDTH) -> tuple[int, int]:
    """(rows, columns) for ``panels`` panels of ``width`` by ``height`` inches: of the grids
    within ``room`` inches (one column, if a panel alone is wider), the one closest to `ASPECT`."""
    fitting = [c for c in range(1, panels + 1) if c * width <= room] or [1]

    def misfit(cols):
        return abs(math.log(cols * width / (math.ceil(panels / cols) * height) / ASPECT))

    rows = math.ceil(panels / min(fitting, key=misfit))
    return rows, math.ceil(panels / rows)  # as few columns as the rows need: no empty row end


def layout(
    picture: AttentionPicture, kinds: list[str], scale: str, panels: int, colours: TypeColours | None = None
) -> tuple[list, int, int, tuple]:
    """The panel sizes of one head (`panel_sizes`), the (rows, columns) of ``panels`` heads (and
    the panel of types) and the figure's (width, height), at the widest token spacing from
    `INCH_PER_TOKEN` down to `MIN_INCH_PER_TOKEN` whose figure fits `MAX_WIDTH` by `MAX_HEIGHT`
    (the narrowest, if none does); a legend of edge ``colours`` stands right of them all."""
    shared = scale == "shared"  # then one colour bar and one legend serve the whole figure
    extra_width = (shared and "heatmap" in kinds) * COLORBAR_WIDTH + (colours is not None and legend_width(colours))
    extra_height = TITLE_HEIGHT + (shared and "graph" in kinds) * LEGEND_HEIGHT
    # A long map's blocks are ticked every binned.TICK_EVERY-th one: its labels are as far apart as tokens'.
    per_label = binned.TICK_EVERY if picture.blocks else 1
    for spacing in np.linspace(INCH_PER_TOKEN, MIN_INCH_PER_TOKEN, 8) / per_label:
        sizes = panel_sizes(picture, kinds, scale, spacing)
        width, height = sum(w for w, _ in sizes), max(h for _, h in sizes)
        rows, cols = grid_shape(panels, width, height, MAX_WIDTH - extra_width)
        figure_size = (cols * width + extra_width, rows * height + extra_height)
        if figure_size[0] <= MAX_WIDTH and figure_size[1] <= MAX_HEIGHT:
            break
    return sizes, rows, cols, figure_size
