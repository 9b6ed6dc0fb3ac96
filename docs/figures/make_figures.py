"""Draws the figures of the README and the documentation from the library itself.

    python docs/figures/make_figures.py

The attention figure is what the README's commands write: a small copy model trained with
``--viz-every`` (into the ignored runs/readme-copy, about 3 minutes on 2 cores; reused when there),
then ``graphformer heatmap --relation cross``: one heatmap, narrow enough that its tokens stay
readable where a page shrinks it to its width. The rollout figure is the README's ``graphformer
attend --show rollout`` on the same run, written under runs/ as the README writes it, then copied.
"""

import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

from graphformer import GraphPool  # noqa: E402
from graphformer.graphs import CROSS, DEC, ENC  # noqa: E402
from graphformer.viz.plots import pattern_matrices  # noqa: E402

HERE = Path(__file__).parent
RUN = HERE.parent.parent / "runs" / "readme-copy"
ROLLOUT = ["--input", "g r a p h f o r m e r", "--show", "rollout"]  # the README's graphformer attend options


def three_graphs(n=4, m=3):
    g = GraphPool().graph(n, m)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    layouts = {
        ENC: ("enc: source -> source", "s", "s"),
        DEC: ("dec: target -> target (causal)", "t", "t"),
        CROSS: ("cross: source -> target", "s", "t"),
    }
    for ax, (etype, (title, a, b)) in zip(axes, layouts.items()):
        u, v = g.edges(etype=etype)
        graph = nx.DiGraph()
        graph.add_edges_from((f"{a}{i}", f"{b}{j}") for i, j in zip(u.tolist(), v.tolist()))
        if a == b:
            pos = nx.circular_layout(sorted(graph.nodes))
        else:
            pos = {f"s{i}": (i, 1) for i in range(n)} | {f"t{j}": (j + 0.5, 0) for j in range(m)}
        nx.draw_networkx(
            graph,
            pos,
            ax=ax,
            node_color=["tab:blue" if x[0] == "s" else "tab:orange" for x in graph.nodes],
            font_color="white",
            arrowsize=10,
            connectionstyle="arc3,rad=0.1",
        )
        ax.set_title(f"{title}: {len(u)} edges", fontsize=10)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(HERE / "three_graphs.png", dpi=110)


def attention_after_training():
    from graphformer.cli import main

    if not (RUN / "checkpoint_best.pt").exists():
        # the quick start's two commands, as the README writes them: the figure is the one they make
        assert (
            main(
                [
                    "train",
                    "--task",
                    "copy",
                    "--out",
                    str(RUN),
                    "--epochs",
                    "8",
                    "--lr-factor",
                    "0.5",
                    "--viz-every",
                    "1",
                    "--quiet",
                ]
            )
            == 0
        )
    assert main(["heatmap", str(RUN), "--relation", "cross", "-o", str(HERE / "attention_copy.png")]) == 0


def rollout_after_training():
    """The README's rollout picture: which source tokens each output of the copy model depends on."""
    from graphformer.cli import main

    assert main(["attend", str(RUN), *ROLLOUT, "-o", str(RUN / "rollout.png")]) == 0
    shutil.copyfile(RUN / "rollout.png", HERE / "rollout_copy.png")


if __name__ == "__main__":
    attention_after_training()
    rollout_after_training()
    three_graphs()
    pattern_matrices(
        ["full", "causal", "window:2", "dilated:2,3", "window:1+global:1", "block:4", "random:2,0"],
        n=16,
        path=HERE / "patterns.png",
    )
    print(
        "wrote",
        HERE / "attention_copy.png",
        HERE / "rollout_copy.png",
        HERE / "three_graphs.png",
        HERE / "patterns.png",
    )
