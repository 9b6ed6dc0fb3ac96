"""The sizes of the text in attention pictures, and how much room a piece of text takes.

A picture is laid out in inches around its text (`graphformer.viz.plots.layout`), so the text
keeps its size whatever the number of tokens, and a page that shrinks a picture to its width
shrinks the text with it: the tokens are a little larger than matplotlib's default 8-point ticks
so that they stay readable at the width of a documentation page.
"""

from __future__ import annotations

TOKEN = 9  # points: a token on a tick or beside a node
LABEL = 9  # an axis's name (``keys: source tokens``)
PANEL_TITLE = 10  # a panel's title (``head 0``)
FIGURE_TITLE = 11  # the picture's one title (sub-layer, layer, epoch)
LEGEND = 8

# Estimates used before a figure is drawn (afterwards matplotlib measures the text itself): the
# advance of one character, and the height of one line with its spacing, in inches per point of
# font size (DejaVu Sans, matplotlib's default font).
CHAR_WIDTH = 0.0085
LINE_HEIGHT = 0.0195


def text_width(string, points: float = TOKEN) -> float:
    """Inches a line of ``string`` takes at ``points``; its longest line if it has several."""
    return CHAR_WIDTH * points * max((len(line) for line in str(string).split("\n")), default=0)


def longest(strings, points: float = TOKEN) -> float:
    """Inches the longest of ``strings`` takes (rotated 90 degrees: its height)."""
    return max((text_width(s, points) for s in strings), default=0.0)


def line_height(points: float) -> float:
    """Inches one line of text at ``points`` takes across its line."""
    return LINE_HEIGHT * points


def break_name(name: str) -> str:
    """An axis's name on two lines, broken after its first ``: `` (``keys:`` over
    ``source tokens``); a name without one stays on one line."""
    return name.replace(": ", ":\n", 1)
