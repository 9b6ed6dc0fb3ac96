"""Edges coloured by their type: a colour per type id, a legend of at most `MAX_ENTRIES` entries,
and the small matrix of types the heatmap view shows beside the heads.

An edge of one type keeps its colour from head to head and from frame to frame of an animation:

* types without an order (tree roles, given types) take a qualitative palette, the colour of id t
  being the palette's t-th (past its end, types are ranked by how many edges have them, and the
  rarest share a grey "other types" entry);
* types that are spans of one quantity (offsets, distances, hops) take a colour ramp along it,
  spread over the types present (the same in every head and frame: one sample, one sub-layer);
  where more than `MAX_ENTRIES` are present, neighbours join into spans (``offset -16..-9``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D

from graphformer.viz import text_sizes
from graphformer.viz.type_labels import EdgeTypeMap, span_name

MAX_ENTRIES = 8  # legend entries: more than this are read by hunting, not at a glance
# tab10 without its blue and orange, the colours of the key and query markers; grey last, for a
# tree role's "other".
PALETTE = [to_rgb(colormaps["tab10"].colors[i]) for i in (2, 3, 4, 5, 6, 8, 9, 7)]
OTHER_RGB = (0.6, 0.6, 0.6)
# The ramp of ordered types, stopped short of its pale end: an edge of the last type stays visible on white.
RAMP, RAMP_END = colormaps["plasma"], 0.85


@dataclass
class TypeColours:
    """The colours of one `EdgeTypeMap`: ``rgb`` (types, 3) per type id, and the legend's
    ``entries`` [(name, rgb)] in the order they are listed, under ``title``."""

    rgb: np.ndarray
    entries: list
    title: str

    def of_edges(self, ids: np.ndarray) -> np.ndarray:
        """(queries, keys, 3) the colour of each edge of a (queries, keys) matrix of ids (-1: none, white)."""
        table = np.vstack([self.rgb, np.ones(3)])  # row -1: no edge
        return table[ids]


def type_colours(types: EdgeTypeMap, loops: bool = True) -> TypeColours:
    """The colours and legend of ``types`` (see the module); the legend lists the types of the
    edges drawn: without ``loops``, a node's edge to itself is not (a tree's node shows it)."""
    drawn = types.ids >= 0
    if not loops:
        drawn &= ~np.eye(*types.ids.shape, dtype=bool)
    present, counts = np.unique(types.ids[drawn], return_counts=True)
    count = max(len(types.names), int(types.ids.max(initial=-1)) + 1)  # rows of the colour table
    title = f"edge colour: {types.spec}"
    if types.ranges is not None:
        return _ramp(types, present, count, title)
    if count <= len(PALETTE) and len(present) <= MAX_ENTRIES:
        rgb = np.array(PALETTE[:count])
        return TypeColours(rgb, [(types.names[t], rgb[t]) for t in present], title)
    # Too many to tell apart: the most frequent keep a colour each, the rest share grey.
    ranked = present[np.argsort(-counts, kind="stable")]
    named, rest = ranked[: MAX_ENTRIES - 1], ranked[MAX_ENTRIES - 1 :]
    rgb = np.tile(OTHER_RGB, (count, 1))
    rgb[named] = PALETTE[: len(named)]
    entries = [(types.names[t], rgb[t]) for t in sorted(named)]
    if len(rest):
        entries.append((f"{len(rest)} other types", np.array(OTHER_RGB)))
    return TypeColours(rgb, entries, title)


def _ramp(types: EdgeTypeMap, present: np.ndarray, count: int, title: str) -> TypeColours:
    """The ``present`` types in the order of their spans, joined into at most `MAX_ENTRIES`
    neighbouring groups, the groups spread evenly along the ramp (a window's offsets -3..3 span
    it all, however many types the clip allows)."""
    order = present[np.argsort([types.ranges[t][0] for t in present], kind="stable")]
    groups = [[t] for t in order] if len(order) <= MAX_ENTRIES else np.array_split(order, MAX_ENTRIES)
    rgb = np.tile(OTHER_RGB, (count, 1))  # types no edge of the picture has
    entries = []
    for i, group in enumerate(groups):
        rgb[group] = RAMP(RAMP_END * i / max(len(groups) - 1, 1))[:3]
        first, last = types.ranges[group[0]], types.ranges[group[-1]]
        name = types.names[group[0]] if len(group) == 1 else span_name(types.quantity, first[0], last[1])
        entries.append((name, rgb[group[0]]))
    return TypeColours(rgb, entries, title)


def type_legend(target, colours: TypeColours, **placement):
    """A legend on ``target`` (an Axes or a Figure) of the edge colour of each type."""
    handles = [Line2D([], [], color=rgb, linewidth=2.5) for _, rgb in colours.entries]
    return target.legend(
        handles,
        [name for name, _ in colours.entries],
        title=colours.title,
        fontsize=text_sizes.LEGEND,
        title_fontsize=text_sizes.LEGEND,
        frameon=False,
        **placement,
    )


def legend_width(colours: TypeColours) -> float:
    """Inches a `type_legend` takes beside the panels: its longest line, and the line of colour."""
    lines = [colours.title] + [name for name, _ in colours.entries]
    return text_sizes.longest(lines, text_sizes.LEGEND) + 0.6


def type_matrix(ax, types: EdgeTypeMap, colours: TypeColours, key_tokens, query_tokens, key_axis, query_axis):
    """The (queries, keys) matrix of edge types on ``ax``, each cell in its type's colour (no
    edge: blank), ticked as a heatmap is: the heatmap view's key to the graph view's colours."""
    ax.imshow(colours.of_edges(types.ids), aspect="auto")  # square cells: `plots.layout` sizes the panel
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=text_sizes.TOKEN)
    ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=text_sizes.TOKEN)
    ax.set_xlabel(key_axis, fontsize=text_sizes.LABEL)
    ax.set_ylabel(query_axis, fontsize=text_sizes.LABEL)
    ax.set_title(f"edge types: {types.spec}", fontsize=text_sizes.PANEL_TITLE)


__all__ = ["TypeColours", "type_colours", "type_legend", "legend_width", "type_matrix", "MAX_ENTRIES"]
