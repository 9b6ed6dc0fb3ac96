"""The names the command line offers and the library accepts, each written here once.

The command line shows these in ``--help`` and checks arguments against them before anything
heavy loads, so this module imports nothing (no torch, no DGL, no matplotlib); the modules that
implement each choice import their list from here instead of writing it again.
"""

from __future__ import annotations

# graphformer.attention's backends (its BACKENDS maps each name to its function).
ATTENTION_BACKENDS = ("auto", "dgl", "torch", "padded", "blocked", "flex")
DEFAULT_BACKEND = "auto"

# What a model computes in (graphformer.precision). Training in float16 would need loss scaling,
# which the trainer does not do.
PRECISIONS = ("float32", "bfloat16", "float16")
TRAIN_PRECISIONS = PRECISIONS[:2]

# The length penalty's exponent when none is given (the library's search functions and the
# command line's --alpha): a mild preference for longer outputs. Choose it on the validation
# split (tune.sh).
DEFAULT_ALPHA = 0.6

# Attention patterns (graphformer.graphs.patterns): each name with the arguments it takes after
# a colon, as ``train --help`` writes them ("" for none).
PATTERN_ARGUMENTS = {
    "full": "",
    "causal": "",
    "window": "W",
    "mirror": "W",
    "dilated": "W,D",
    "global": "G",
    "block": "B",
    "random": "R[,SEED]",
    "tree": "K",
}
PATTERN_NAMES = sorted(PATTERN_ARGUMENTS)
ENCODER_ONLY_PATTERNS = ("tree",)
# Terms naming each sample's own edges (graphformer.graphs.sample_edges): derived from its source
# tokens for one relation, or given beside the data.
SAMPLE_TERMS = {
    "parse-tree": "the source's parse tree (encoder only)",
    "operands": "target position t reads position t of each operand of A + B (cross only)",
    "edges": "{split}.{relation}.edges",
}

# What graphformer.viz draws: the relations it records, a panel's view, the colour scale, and the
# files it writes.
RELATIONS = ("enc", "dec", "cross")
VIEWS = ("heatmap", "graph", "both")  # what one panel of a picture shows
SCALES = ("shared", "per-head")  # one colour scale for all panels, or one each
ANIMATION_FORMATS = (".gif", ".html")
IMAGE_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")  # matplotlib writes these alone (.pgf needs LaTeX)


def pattern_syntax() -> str:
    """The pattern names as ``train --help`` lists them: ``full, causal, window:W, ...``."""

    def one(name):
        arguments = PATTERN_ARGUMENTS[name]
        shown = f"{name}:{arguments}" if arguments else name
        return shown + (" (encoder only)" if name in ENCODER_ONLY_PATTERNS else "")

    sample = ", ".join(f"{name} ({what})" for name, what in SAMPLE_TERMS.items())
    return ", ".join(one(name) for name in PATTERN_ARGUMENTS) + "; each sample's own edges: " + sample
