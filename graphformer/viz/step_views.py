"""How a universal model's maps read as steps: its grid's rows are ACT steps, not layers, each
query is labelled with the steps it pondered, and at a step after a query halted its row (blank:
no attention) is hatched grey, so a halted token reads apart from a sparse pattern's gaps.

Used by `graphformer.viz.attend_views.draw_grid` on an `Attended` whose ``ponder`` is set.
"""

from __future__ import annotations

HALTED_COLOUR = "0.85"  # light grey under the hatching: lighter than any viridis colour
HALTED_HATCH = "////"
LEGEND = "(n): ACT steps the token pondered; hatched rows: halted before this step"


def ponder_labels(tokens: list[str], ponder: list[int]) -> list[str]:
    """Each query token with the steps it pondered beside it: ``cat (3)``."""
    return [f"{token} ({steps})" for token, steps in zip(tokens, ponder)]


def halted_rows(ponder: list[int], step: int) -> list[int]:
    """The query rows halted before ``step`` (counted from 1): those that pondered fewer steps."""
    return [row for row, steps in enumerate(ponder) if steps < step]


def mark_halted(ax, ponder: list[int], step: int) -> None:
    """Hatch, across the whole map on ``ax``, the row of each query halted before ``step``."""
    for row in halted_rows(ponder, step):
        ax.axhspan(row - 0.5, row + 0.5, facecolor=HALTED_COLOUR, hatch=HALTED_HATCH, edgecolor="0.6", linewidth=0)
