"""How a universal model's maps read as steps: its grid's rows are ACT steps, not layers, each
query is labelled with the steps it pondered, and at a step after a query halted its row (blank:
no attention) is hatched grey, so a halted token reads apart from a sparse pattern's gaps.

Used by `graphformer.viz.attend_views.draw_grid` on an `Attended` whose ``ponder`` is set, and
by `graphformer.viz.recording.picture` on a universal run's recording (`step_picture`), whose
panels are the steps: one frame of ``graphformer animate`` per epoch shows every step.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from graphformer.viz.plots import AttentionPicture

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


def step_picture(
    picture: AttentionPicture, maps: np.ndarray, heads: list[int], ponder: list[int] | None, title: str
) -> AttentionPicture:
    """``picture`` with a panel per ACT step and head of ``maps`` ((steps, heads, queries, keys),
    NaN where a query had halted: its row is blank), each query labelled with the steps it pondered
    (``ponder``; None for a long map drawn in blocks of queries, which have no one count)."""
    steps, _, queries, keys = maps.shape
    titles = [f"step {s}" + (f", head {h}" if len(heads) > 1 else "") for s in range(1, steps + 1) for h in heads]
    return replace(
        picture,
        maps=maps.reshape(steps * len(heads), queries, keys),
        queries=picture.queries if ponder is None else ponder_labels(picture.queries, ponder),
        panel_titles=titles,
        title=f"{title}; (n): steps pondered, blank row: halted",
    )
