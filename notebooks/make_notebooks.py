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

def train(run, data, *args, task="parallel"):
    """Train on the `task`'s files in `data` into `run`, once: a finished run is reused, and one
    that was interrupted is finished first."""
    if (run / "checkpoint_last.pt").exists():
        graphformer("train", "--out", run, "--resume", "--quiet")
    else:
        graphformer("train", "--task", task, "--data-dir", data, "--out", run, "--quiet", *args)
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
    "04_tree_attention.ipynb": [
        new_markdown_cell(
            "# Attention on a parse tree: Boolean formulas\n\nA small encoder classifier learns to evaluate "
            "Boolean formulas such as `[AND 1 [OR 0 0 1 ] ]` (a few minutes on 2 CPU cores). Its attention runs "
            "along each formula's own parse tree (`--enc-attention parse-tree`), and it reads its answer from "
            "`</s>`, which the tree joins to the outermost gate (`--pooling last`). Then, on a formula you write: "
            "what it attends to, and which tokens reach its answer through all the layers (rollout and flow)."
        ),
        new_code_cell(SETUP),
        new_code_cell("""from graphformer.data import boolean
# formulas of 10 to 40 tokens, gates nested at most 3 deep (the leaves at depth 4), 2 to 4 inputs a gate
name = "boolean-quick" if QUICK else "boolean"
data = boolean.write_boolean(WORK / f"{name}-data", seed=1, min_length=10, max_length=40, max_depth=4, max_args=4,
                             sizes={"train": 600, "valid": 50, "test": 50} if QUICK else
                                   {"train": 4000, "valid": 200, "test": 200})
print(open(data / "train.src").readline(), open(data / "train.tgt").readline())"""),
        new_markdown_cell(
            "Five layers: information moves one level of the tree per layer, and a leaf is at most four edges "
            "from `</s>`. The tree carries the structure, so the model has no positions (`--positions none`)."
        ),
        new_code_cell("""run = WORK / f"{name}-tree"
train(run, data, "--model", "encoder", "--enc-attention", "parse-tree", "--positions", "none", "--pooling", "last",
      "--layers", 5, "--d-model", 64, "--heads", 4, "--d-ff", 128, "--dropout", 0, "--label-smoothing", 0,
      "--lr-factor", 0.5, "--epochs", 1 if QUICK else 6, task="boolean")
for line in open(run / "metrics.jsonl"):
    metrics = json.loads(line)
    print(f"epoch {metrics['epoch']}: validation accuracy {metrics['valid_accuracy']:.3f}")"""),
        new_markdown_cell(
            "With these settings it trains in about two minutes and gets most test formulas right; the measured "
            'figures are in `docs/results.md` ("Structure from the data").'
        ),
        new_markdown_cell(
            "## Your formula\n\nEdit `FORMULA` and run the cells below. Gates `[AND`, `[OR`, `[NAND` and "
            "`[NOR` take two or more inputs and close with `]`; an input is a bit, `0` or `1`, or a gate; tokens "
            "are separated by spaces. The model learned on formulas of 10 to 40 tokens, gates nested at most 3 deep."
        ),
        new_code_cell('''FORMULA = "[AND 1 [OR 0 0 1 ] [NOR 0 [NAND 1 1 ] ] 1 ]"

def value(formula):
    """The formula's true value, to compare with the model's: each gate applied as its `]` closes it."""
    open_gates = [("", [])]  # (gate, its inputs so far); the bottom one receives the formula's value
    for word in formula.split():
        if word in boolean.GATES:
            open_gates.append((word, []))
        elif word == "]":
            gate, inputs = open_gates.pop()
            open_gates[-1][1].append(boolean.apply(gate, inputs))
        else:
            open_gates[-1][1].append(int(word))
    return open_gates[0][1][0]'''),
        new_markdown_cell(
            "Every layer (rows) and head (columns), as `graphformer attend RUN --input FORMULA -o formula.png` "
            "draws them: each token attends to its neighbours in the tree and to itself, and the blank cells are "
            "the pairs the tree does not join."
        ),
        figure_cell("""import graphformer.viz
from graphformer.running.loaded import LoadedRun
loaded = LoadedRun(run)  # the best checkpoint, loaded once for every cell below
attended = graphformer.viz.attend(loaded, [FORMULA], out=WORK / "formula.png")[0]
print(f"{attended.title}; the formula's value is {value(FORMULA)}")
display(Image(WORK / "formula.png"))"""),
        new_markdown_cell(
            "The last layer's heads drawn on the tree: `</s>` on top, each gate's inputs in the row below it; "
            "the half of an edge next to a node is as wide as the weight that node puts on the other end."
        ),
        figure_cell("""from graphformer.viz.picture import AttentionPicture
from graphformer.viz.plots import draw, png_bytes
tokens = attended.tokens["enc"][0]  # the nodes: the formula's tokens, then </s>
maps = attended.maps["enc"]  # (layers, heads, nodes, nodes), NaN where the tree has no edge
last = AttentionPicture(maps[-1].numpy(), tokens, tokens, [f"head {h}" for h in range(maps.shape[1])],
                        title=f"layer {maps.shape[0]} on the parse tree", layout="tree")
Image(png_bytes(draw(last, view="graph")))"""),
        new_markdown_cell(
            "## Rollout and flow: what reaches the answer\n\nOne map says where a node looks in one layer. "
            "Rollout multiplies the layers' maps (heads averaged, each mixed half and half with the residual): "
            "row `</s>` is the share of each input token in the node the classifier reads. Flow treats each "
            "weight as a capacity and asks how much can pass from a token up to `</s>` at once. Both run along "
            'the tree\'s own edges (`docs/howto/watch.md`, "Rollout and flow").'
        ),
        figure_cell("""from graphformer.viz import draw_rollout
(rolled,) = draw_rollout(loaded, [FORMULA], out=WORK / "rollout.png")  # attend --show rollout
display(Image(WORK / "rollout.png"))"""),
        new_markdown_cell(
            "The heatmap's rows are the nodes after the last layer, its columns the input tokens; the tree "
            "colours each node by its share in `</s>`'s row (`</s>`, ringed, is the node the classifier reads). "
            "Flow asks instead how much can pass from each token up to `</s>` at once:"
        ),
        figure_cell("""answer = len(FORMULA.split())  # </s>, after the formula's tokens: flow into it alone (one max-flow per token)
(flowed,) = draw_rollout(loaded, [FORMULA], out=WORK / "flow.png", show="flow", query=answer)  # attend --show flow
display(Image(WORK / "flow.png"))
tokens = flowed.tokens["enc"][1]  # the keys: the formula's tokens, then </s>
leaves = [j for j, token in enumerate(tokens) if token in boolean.BITS]
for what, result in (("rollout", rolled), ("flow", flowed)):
    row = result.maps["enc"][0, 0][result.rows.index(answer)].numpy()
    ranked = sorted(leaves, key=lambda j: -row[j])
    print(f"leaves by {what} into </s>:", ", ".join(f"{tokens[j]} (node {j}) {row[j]:.3f}" for j in ranked))"""),
    ],
}


def main():
    for name, cells in NOTEBOOKS.items():
        for number, cell in enumerate(cells):
            cell.id = f"cell-{number}"  # not nbformat's random ids: writing again changes nothing
        nb = new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        )
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
