"""Writes the notebooks in this folder from the cell sources below (outputs are never stored).

    python notebooks/make_notebooks.py

Cells that draw are tagged: ``figure`` cells must show an image (PNG), ``player`` cells an HTML
page; tests/docs/test_notebooks.py runs every notebook and counts them.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent


def figure_cell(source: str, tag: str = "figure"):
    """A code cell that must show a picture when run (checked by tests/docs/test_notebooks.py)."""
    return new_code_cell(source, metadata={"tags": [tag]})


SETUP = '''import os, subprocess, sys, json, tempfile
from pathlib import Path
import torch
from IPython.display import HTML, Image, display
QUICK = os.environ.get("GRAPHFORMER_QUICK") == "1"   # CI runs the notebooks small
# Runs and pictures go outside the repository (`make lab` points this at the ignored runs/notebooks).
WORK = Path(os.environ.get("GRAPHFORMER_NOTEBOOK_DIR") or Path(tempfile.gettempdir()) / "graphformer-notebooks")
WORK.mkdir(parents=True, exist_ok=True)
print("runs and pictures in", WORK)

def graphformer(*args):
    """Run the command-line tool and show its last lines."""
    proc = subprocess.run([sys.executable, "-m", "graphformer", *map(str, args)], capture_output=True, text=True)
    print(proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.returncode == 0

def train(run, data, *args):
    """Train on the parallel files in `data` into `run`, once: a finished run is reused, and one
    that was interrupted is finished first."""
    if (run / "checkpoint_last.pt").exists():
        graphformer("train", "--out", run, "--resume", "--quiet")
    else:
        graphformer("train", "--task", "parallel", "--data-dir", data, "--out", run, "--quiet", *args)
'''

SMALL_DATA = """from graphformer.data import synthetic
data = synthetic.write_task("{task}", WORK / "{task}-data", seed=1,
                        sizes={{"train": 600, "valid": 50, "test": 50}} if QUICK else synthetic.SPLITS)
"""

NOTEBOOKS = {
    "01_attention_animation.ipynb": [
        new_markdown_cell(
            "# Watching attention learn to copy\n\nA small Transformer learns the copy task "
            "(about 2 minutes on 2 CPU cores). Every epoch the cross-attention of one validation "
            "sentence is recorded; at the end it is a diagonal: each output token looks at the "
            "input token it copies."
        ),
        new_code_cell(SETUP),
        new_code_cell(SMALL_DATA.format(task="copy")),
        new_code_cell("""run = WORK / "copy-viz"
train(run, data, "--epochs", 2 if QUICK else 8, "--layers", 2, "--d-model", 128, "--heads", 4, "--d-ff", 256,
      "--lr-factor", 0.5, "--viz-every", 1)
print(open(run / "metrics.jsonl").read())"""),
        new_markdown_cell(
            "Step through the epochs (epoch 0 is the untrained model): the player is one "
            "self-contained page, also written to `cross.html`. Each frame shows the heatmap and the "
            "same weights as a bipartite graph, source tokens on top, decoder inputs below."
        ),
        figure_cell(
            """graphformer("animate", run, "--relation", "cross", "--layer", -1, "--head", 0, "--view", "both",
            "-o", WORK / "cross.html")
HTML((WORK / "cross.html").read_text())""",
            tag="player",
        ),
        new_markdown_cell("Every head of the last layer after training, each on its own colour scale:"),
        figure_cell("""graphformer("heatmap", run, "--relation", "cross", "--layer", -1, "--head", "all", "--scale", "per-head",
            "-o", WORK / "cross.png")
display(Image(WORK / "cross.png"))"""),
    ],
    "02_sparse_patterns.ipynb": [
        new_markdown_cell(
            "# Attention is a choice of edges\n\nDraw attention patterns as matrices and as "
            "graphs, then compare how fast the attention operator runs on them."
        ),
        new_code_cell(SETUP),
        figure_cell("""import matplotlib.pyplot as plt
import networkx as nx
from graphformer.graphs import patterns
from graphformer.viz.plots import pattern_matrices, png_bytes

figure = pattern_matrices(["full", "causal", "window:2", "dilated:2,3", "global:1+window:1", "block:4", "random:2,0"], n=16)
Image(png_bytes(figure))"""),
        figure_cell("""u, v = patterns.parse("window:1+global:1")(10, 10)
g = nx.DiGraph(list(zip(u.tolist(), v.tolist())))
g.remove_edges_from(nx.selfloop_edges(g))
nx.draw_circular(g, with_labels=True, node_color="tab:orange", arrowsize=8)
plt.title("window:1+global:1 as a graph")
plt.show()"""),
        new_markdown_cell(
            "## Accuracy: does a narrow window still copy?\n\nEach output token of the copy task "
            "only needs the input token at its own position, so a window of 1 around the diagonal "
            "in cross-attention should be enough."
        ),
        new_code_cell(SMALL_DATA.format(task="copy")),
        new_code_cell("""results = {}
for name, enc, dec, cross in [("full", "full", "causal", "full"),
                              ("window", "window:2", "causal-window:2", "window:1")]:
    run = WORK / f"copy-{name}"
    train(run, data, "--epochs", 1 if QUICK else 6, "--layers", 2, "--d-model", 128, "--heads", 4, "--d-ff", 256,
          "--lr-factor", 0.5, "--enc-attention", enc, "--dec-attention", dec, "--cross-attention", cross)
    results[name] = json.loads(open(run / "metrics.jsonl").read().splitlines()[-1])
for name, m in results.items():
    print(f"{name:7s} valid token accuracy {m['valid_token_accuracy']:.4f}  exact match {m['valid_exact_match']:.3f}")"""),
        new_markdown_cell("## Speed of the attention operator"),
        new_code_cell("""import time
from graphformer.attention import BACKENDS, unavailable
from graphformer.graphs.relation import Relation
edgewise = "torch" if unavailable("dgl") else "dgl"  # DGL's edge-wise kernels where DGL is installed
L = 512 if QUICK else 2048
q, k, v_ = (torch.randn(L, 8, 64, requires_grad=True) for _ in range(3))
for spec in ["window:16", "window:64", "full"]:
    u, v = patterns.parse(spec)(L, L)
    graph = Relation(u, v, L, L)
    for backend in (edgewise, "blocked"):
        BACKENDS[backend](graph, q, k, v_).sum().backward()
        tic = time.perf_counter()
        BACKENDS[backend](graph, q, k, v_).sum().backward()
        print(f"{spec:10s} {backend:8s} {len(u):9d} edges  {1e3 * (time.perf_counter() - tic):8.1f} ms")"""),
    ],
    "03_universal_transformer.ipynb": [
        new_markdown_cell(
            "# The Adaptive Universal Transformer: who ponders how long\n\nOne shared layer per "
            "side, repeated; each token halts when its summed halting probability passes the "
            "threshold, and leaves the graph."
        ),
        new_code_cell(SETUP),
        new_code_cell(SMALL_DATA.format(task="sort")),
        new_code_cell("""run = WORK / "sort-ut"
train(run, data, "--model", "universal", "--max-depth", 6, "--epochs", 1 if QUICK else 6, "--d-model", 64,
      "--heads", 4, "--d-ff", 128, "--lr-factor", 0.5)
metrics = [json.loads(line) for line in open(run / "metrics.jsonl")]
metrics[-1]"""),
        figure_cell("""from graphformer.viz.plots import ponder_distribution
ponder_distribution(metrics, WORK / "ponder_epochs.png")
display(Image(WORK / "ponder_epochs.png"))"""),
        figure_cell("""import matplotlib.pyplot as plt
for side in ("src", "tgt"):
    plt.plot(range(1, len(metrics[-1][f"valid_{side}_step_fraction"]) + 1),
             metrics[-1][f"valid_{side}_step_fraction"], "o-", label=side)
plt.xlabel("ACT step"); plt.ylabel("fraction of tokens still active"); plt.legend(); plt.show()"""),
        figure_cell("""from graphformer.running.loaded import LoadedRun
from graphformer.graphs import make_batch
from graphformer.viz.plots import ponder_map
loaded = LoadedRun(run)
split = loaded.split("valid")
batch = make_batch(loaded.model.make_pool(), split.src[:1], split.tgt[:1])
with torch.no_grad():
    stats = loaded.model(batch, full_output=True).stats
tokens = split.src_words[0] + ["</s>"]
ponder_map(stats["src"].steps.tolist(), tokens, WORK / "ponder.png", "source tokens: ACT steps")
display(Image(WORK / "ponder.png"))"""),
    ],
}


def main():
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        )
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
