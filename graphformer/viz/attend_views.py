"""What `graphformer.viz.attend` writes: for each input line, a picture of every chosen sub-layer
as a grid of layers (rows) by heads (columns), or the offline HTML page of `attend_page`; and the
maps themselves, as a torch file, for a notebook or a test to read back. A universal model's rows
are its ACT steps, its halted queries hatched (see `step_views`).

File names: one input writes ``out`` itself; several write ``out`` with the input's index (from 0)
before the suffix, ``runs/x.png`` -> ``runs/x.0.png``, ``runs/x.1.png``. Every file is drawn before
the first is written, and each is written atomically, so a refused input writes nothing.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from graphformer.choices import IMAGE_FORMATS
from graphformer.errors import UserError
from graphformer.files import write_atomic
from graphformer.running.loaded import LoadedRun
from graphformer.viz import binned, panel_layout, plots
from graphformer.viz.attend_page import attend_page
from graphformer.viz.edge_maps import EdgeMaps
from graphformer.viz.on_demand import Attended, attend_lines, check_choice, check_steps, encode_inputs, load, shown
from graphformer.viz.step_views import LEGEND, mark_halted, ponder_labels

PAGE_FORMAT = ".html"
FORMATS = (*IMAGE_FORMATS, PAGE_FORMAT)
MAPS_FORMAT = ".pt"

# A grid too wide for readable token labels at panel_layout.MIN_INCH_PER_TOKEN shrinks its panels, without
# labels, to stay within this many inches a side: 19,200 pixels at save_figure's 120 dpi, under
# the 65,536 that matplotlib's Agg canvas draws at most.
MAX_FIGURE_INCHES = 160.0
PANEL_MARGIN = (1.4, 1.1)  # inches around each panel for its ticks, axis names and title
MIN_ROW = 2.6  # inches: a short map's row still holds its query axis's name beside it


def check_output(path: str | Path) -> Path:
    """``path``, if its suffix is a picture's or the page's; else a one-line UserError."""
    return plots.output_path(path, FORMATS, "the maps")


def check_maps_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix != MAPS_FORMAT:
        raise UserError(f"--save-maps {path}: the maps are saved with torch.save; give a name ending in {MAPS_FORMAT}")
    return path


def output_paths(out: str | Path, count: int) -> list[Path]:
    """The file of each of ``count`` inputs (see the module's docstring)."""
    out = Path(out)
    return [out] if count == 1 else [out.with_name(f"{out.stem}.{i}{out.suffix}") for i in range(count)]


def grid_size(blocks: list) -> tuple[float, float, list[float]]:
    """(row and column spacing, figure width, height of each block) in inches for `draw_grid`'s ``blocks``:
    `panel_layout.INCH_PER_TOKEN` between rows and columns where the figure fits `MAX_FIGURE_INCHES`,
    closer where it would not; a row of panels is at least `MIN_ROW` tall, room for its query axis's name."""
    widest = max(len(view.keys) * len(heads) for _, view, _, heads in blocks)
    tallest = sum(len(view.queries) * len(layers) for _, view, layers, _ in blocks)
    cols = max(len(heads) for *_, heads in blocks)
    rows = sum(len(layers) for _, _, layers, _ in blocks)
    room = min(
        (MAX_FIGURE_INCHES - cols * PANEL_MARGIN[0]) / widest, (MAX_FIGURE_INCHES - rows * PANEL_MARGIN[1]) / tallest
    )
    # A long map's blocks are ticked every binned.TICK_EVERY-th one: its labels are as far apart as tokens'.
    per_label = binned.TICK_EVERY if any(view.binned for _, view, _, _ in blocks) else 1
    spacing = min(panel_layout.INCH_PER_TOKEN / per_label, room)
    width = widest * spacing + cols * PANEL_MARGIN[0] + panel_layout.COLORBAR_WIDTH
    row = [max(MIN_ROW, len(view.queries) * spacing + PANEL_MARGIN[1]) for _, view, _, _ in blocks]
    return spacing, width, [height * len(layers) + 0.4 for height, (_, _, layers, _) in zip(row, blocks)]


def draw_grid(attended, layer: int | None = None, head: int | None = None, top: int | None = None):
    """A figure of each sub-layer of ``attended`` (an `Attended`): a block per sub-layer, in it a
    row per layer and a column per head, all on one colour scale from 0 to 1; with ``top``, each
    query's ``top`` strongest keys alone. A long input's maps are drawn in blocks of tokens."""
    blocks = [(s, *shown(attended, s, layer, head, top)) for s in attended.edges]
    spacing, width, heights = grid_size(blocks)
    label_spacing = spacing * (binned.TICK_EVERY if any(view.binned for _, view, _, _ in blocks) else 1)
    figure = plots.new_figure(width, sum(heights) + 0.8 + 0.3 * bool(attended.ponder))  # and the title's lines
    subfigures = np.atleast_1d(figure.subfigures(len(blocks), 1, height_ratios=heights))
    for subfigure, (sublayer, view, layers, heads) in zip(subfigures, blocks):
        queries = view.queries
        key_axis, query_axis = attended.axes[sublayer]
        ponder = None if view.binned else attended.ponder.get(sublayer)  # a block of rows has no one step
        if ponder:
            queries = ponder_labels(queries, ponder)
        axes = subfigure.subplots(len(layers), len(heads), squeeze=False)
        for (r, c), ax in np.ndenumerate(axes):
            title = f"{attended.unit} {layers[r]}, head {heads[c]}"
            args = (ax, view.weights[r, c], view.keys, queries, title, 1.0, key_axis, query_axis)
            image = plots.heatmap(*args, tick_every=binned.TICK_EVERY if view.binned else 1)
            if ponder:
                mark_halted(ax, ponder, layers[r])
            if label_spacing < panel_layout.MIN_INCH_PER_TOKEN:  # too close for text: the pattern alone
                ax.set_xticks([]), ax.set_yticks([])
            if c:
                ax.set_ylabel("")  # the first panel of a row names the queries, the last row the keys
            if r < len(layers) - 1:
                ax.set_xlabel("")
        subfigure.colorbar(image, ax=axes, fraction=0.03, label="weight")
        shows = [f"top {top} keys per query"] * (top is not None) + [view.note] * view.binned
        subfigure.suptitle(f"{sublayer} attention" + "".join(f"; {s}" for s in shows), fontsize=10)
    legend = f"\n{LEGEND}" if attended.ponder else ""
    figure.suptitle(f"{shorten(attended.line)}\n{attended.title}{legend}", fontsize=11)
    return figure


def shorten(line: str, most: int = 120) -> str:
    """``line`` as a title shows it: whole, or its first ``most`` characters and how many there were."""
    return line if len(line) <= most else f"{line[:most]}... ({len(line.split()):,} tokens)"


def render(attended, suffix: str, layer: int | None = None, head: int | None = None, top: int | None = None) -> bytes:
    """The bytes of ``attended``'s file in the format of ``suffix``."""
    if suffix == PAGE_FORMAT:
        return attend_page(attended, layer, head, top).encode("utf-8")
    figure = draw_grid(attended, layer, head, top)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=suffix[1:], dpi=120)
    return buffer.getvalue()


def write(
    results: list, out: str | Path, layer: int | None = None, head: int | None = None, top: int | None = None
) -> list[Path]:
    """Write each of ``results`` (`Attended`) to its `output_paths` file; returns the paths. Every
    file is drawn first (a page over `attend_page.MAX_PAGE_CELLS` is refused before any is written)."""
    suffix = check_output(out).suffix.lower()
    contents = [render(attended, suffix, layer, head, top) for attended in results]
    paths = output_paths(out, len(results))
    for path, content in zip(paths, contents):
        write_atomic(path, lambda f, content=content: f.write(content))
    return paths


def save_maps(results: list, path: str | Path) -> None:
    """Write ``results`` as a torch file: a list of {line, output, probability, maps, tokens,
    ponder} per input, ``maps`` {sub-layer: `EdgeMaps.as_record`}, the edges and their weights
    (O(edges): a line of 2,000 tokens on a sparse graph saves no 2,000 x 2,000 array); ponder: a
    universal model's steps per query, by sub-layer, else empty. `load_maps` reads it back."""
    path = check_maps_path(path)
    saved = [
        {
            "line": a.line,
            "output": a.output,
            "probability": a.probability,
            "maps": {sublayer: maps.as_record() for sublayer, maps in a.edges.items()},
            "tokens": a.tokens,
            "ponder": a.ponder,
        }
        for a in results
    ]
    write_atomic(path, lambda f: torch.save(saved, f))


def load_maps(path: str | Path) -> list[dict]:
    """The inputs `save_maps` wrote to ``path``, each ``maps`` an {sub-layer: `EdgeMaps`} (from a
    file of either kind: edges, or the dense arrays files held before)."""
    saved = torch.load(path, weights_only=True)
    return [{**s, "maps": {k: EdgeMaps.of_record(k, m) for k, m in s["maps"].items()}} for s in saved]


def attend(
    run: str | Path | LoadedRun,
    lines: list[str],
    out: str | Path | None = None,
    *,
    edges: str | Path | None = None,
    sublayer: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    top: int | None = None,
    beam: int = 5,
    checkpoint: str = "best",
) -> list[Attended]:
    """The maps of every sub-layer, layer and head the run's model attends with on each of
    ``lines`` (one call: load, decode, map, and with ``out`` write a picture or HTML page per
    line, see `write`); for a universal model ``layer`` picks an ACT step; ``top`` draws each
    query's ``top`` strongest keys alone. ``run`` is a run
    directory or a `LoadedRun`;
    ``edges`` an edges file, one line per input line, for a run whose encoder reads them."""
    if out is not None:
        check_output(out)
    run = load(run, checkpoint)
    sublayers = check_choice(run, sublayer, layer, head)
    source, sample_edges = encode_inputs(run, list(lines), edges)
    results = attend_lines(run, source, sample_edges, sublayers, beam)
    check_steps(results, layer)
    if out is not None:
        write(results, out, layer=layer, head=head, top=top)
    return results
