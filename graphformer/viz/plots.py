"""Pictures of attention with matplotlib: heatmaps, animations across epochs, bipartite graphs,
and the Universal Transformer's ponder steps."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no screen needed
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import animation  # noqa: E402


def heatmap(weights, key_labels, query_labels, title: str = "", ax=None):
    """One head's (queries, keys) map; NaN (no edge) cells stay blank."""
    if ax is None:
        _, ax = plt.subplots(figsize=(0.35 * len(key_labels) + 2, 0.35 * len(query_labels) + 1.5))
    image = ax.imshow(np.ma.masked_invalid(np.asarray(weights, dtype=float)), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(key_labels)), key_labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(query_labels)), query_labels, fontsize=8)
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    ax.set_title(title, fontsize=9)
    return image


def save_heatmap(weights, key_labels, query_labels, path: str | Path, title: str = "") -> None:
    fig, ax = plt.subplots(figsize=(0.35 * len(key_labels) + 2, 0.35 * len(query_labels) + 1.5))
    image = heatmap(weights, key_labels, query_labels, title, ax)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def animate(frames: list, key_labels, query_labels, titles: list[str], path: str | Path) -> int:
    """Save one frame per map: a GIF (pillow) for ``.gif``, an HTML/JS player otherwise. Returns
    the number of frames."""
    fig, ax = plt.subplots(figsize=(0.35 * len(key_labels) + 2, 0.35 * len(query_labels) + 1.5))
    image = heatmap(frames[0], key_labels, query_labels, titles[0], ax)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()

    def draw(i):
        image.set_data(np.ma.masked_invalid(np.asarray(frames[i], dtype=float)))
        ax.set_title(titles[i], fontsize=9)
        return (image,)

    movie = animation.FuncAnimation(fig, draw, frames=len(frames), interval=600, blit=False)
    path = Path(path)
    if path.suffix.lower() == ".gif":
        movie.save(path, writer=animation.PillowWriter(fps=2))
    else:
        path.write_text(movie.to_jshtml(), encoding="utf-8")
    plt.close(fig)
    return len(frames)


def bipartite_graph(weights, key_labels, query_labels, path: str | Path, title: str = "") -> None:
    """Cross-attention as a bipartite graph: keys on top, queries below, edge width by weight."""
    graph = nx.DiGraph()
    keys = [f"k{i}" for i in range(len(key_labels))]
    queries = [f"q{j}" for j in range(len(query_labels))]
    graph.add_nodes_from(keys + queries)
    w = np.asarray(weights, dtype=float)
    for j in range(w.shape[0]):
        for i in range(w.shape[1]):
            if np.isfinite(w[j, i]) and w[j, i] > 0.02:
                graph.add_edge(keys[i], queries[j], weight=w[j, i])
    pos = {k: (i, 1) for i, k in enumerate(keys)} | {q: (j, 0) for j, q in enumerate(queries)}
    fig, ax = plt.subplots(figsize=(0.45 * max(len(keys), len(queries)) + 1, 3))
    widths = [3 * graph.edges[e]["weight"] for e in graph.edges]
    nx.draw_networkx_edges(graph, pos, ax=ax, width=widths, alpha=0.6, arrows=False)
    nx.draw_networkx_labels(graph, pos, dict(zip(keys + queries, list(key_labels) + list(query_labels))),
                            ax=ax, font_size=8)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ponder_map(steps, labels, path: str | Path, title: str = "ponder steps per token") -> None:
    """Universal Transformer: how many steps each token of a sentence took."""
    fig, ax = plt.subplots(figsize=(0.35 * len(labels) + 2, 2.2))
    ax.bar(range(len(labels)), steps, color="tab:orange")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("steps")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ponder_distribution(metrics: list[dict], path: str | Path) -> None:
    """Universal Transformer: the share of tokens entering each ACT step, epoch by epoch
    (from ``metrics.jsonl`` records), for source and target tokens."""
    sides = [side for side in ("src", "tgt") if f"valid_{side}_step_fraction" in metrics[0]]
    fig, axes = plt.subplots(1, len(sides), figsize=(5 * len(sides), 3.2), squeeze=False)
    for ax, side in zip(axes[0], sides):
        grid = np.array([m[f"valid_{side}_step_fraction"] for m in metrics])
        image = ax.imshow(grid.T, aspect="auto", origin="lower", cmap="magma", vmin=0, vmax=1,
                          extent=(0.5, len(metrics) + 0.5, 0.5, grid.shape[1] + 0.5))
        ax.set_xlabel("epoch")
        ax.set_ylabel("ACT step")
        ax.set_title(f"{side}: share of tokens entering each step", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pattern_matrices(specs: list[str], n: int = 16, path: str | Path | None = None):
    """Each attention pattern spec drawn as its (query, key) matrix for a sequence of n tokens;
    saved to ``path`` when given, and returned as a figure."""
    from graphformer.graphs import patterns

    fig, axes = plt.subplots(1, len(specs), figsize=(2.1 * len(specs), 2.5), squeeze=False)
    for ax, spec in zip(axes[0], specs):
        u, v = patterns.parse(spec)(n, n)
        matrix = np.zeros((n, n))
        matrix[v.numpy(), u.numpy()] = 1
        ax.imshow(matrix, cmap="Greys", vmin=0, vmax=1)
        ax.set_title(f"{spec}\n{len(u)} edges", fontsize=8)
        ax.set_xlabel("key", fontsize=7)
        ax.set_ylabel("query", fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
