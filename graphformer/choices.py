"""The names the command line offers and the library accepts, each written here once.

The command line shows these in ``--help`` and checks arguments against them before anything
heavy loads, so this module imports nothing heavy (no torch, no DGL, no matplotlib); the modules
that implement each choice import their list from here instead of writing it again. The lists of
extension points (backends, patterns, sample terms) are read from `graphformer.catalog`, live:
a plugin's entries are in them.
"""

from __future__ import annotations

from graphformer.catalog import BACKENDS, PATTERNS, SAMPLE_TERMS

# graphformer.attention's backends (its BACKENDS maps each name to its function).
ATTENTION_BACKENDS = BACKENDS.names()
DEFAULT_BACKEND = "auto"

# What a model computes in (graphformer.precision). Training in float16 would need loss scaling,
# which the trainer does not do.
PRECISIONS = ("float32", "bfloat16", "float16")
TRAIN_PRECISIONS = PRECISIONS[:2]

# The length penalty's exponent when none is given (the library's search functions and the
# command line's --alpha): a mild preference for longer outputs. Choose it on the validation
# split (tune.sh).
DEFAULT_ALPHA = 0.6

# Attention patterns (graphformer.graphs.patterns) and the terms naming each sample's own edges
# (graphformer.graphs.sample_edges): see graphformer.catalog.
PATTERN_NAMES = PATTERNS.names(ordered=True)

# What graphformer.viz draws: the attention sub-layers it records (each named as its etype's middle
# string), a panel's view, the colour scale, and the files it writes.
SUBLAYERS = ("enc", "dec", "cross")
VIEWS = ("heatmap", "graph", "both")  # what one panel of a picture shows
SCALES = ("shared", "per-head")  # one colour scale for all panels, or one each
ANIMATION_FORMATS = (".gif", ".html")
IMAGE_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")  # matplotlib writes these alone (.pgf needs LaTeX)


def pattern_syntax() -> str:
    """The pattern names as ``train --help`` lists them: ``full, causal, window:W, ...``."""

    def one(entry):
        arguments = entry.details.get("arguments", "")
        shown = f"{entry.name}:{arguments}" if arguments else entry.name
        return shown + (" (encoder only)" if entry.can("encoder-only") else "")

    sample = ", ".join(f"{entry.name} ({entry.summary})" for entry in SAMPLE_TERMS.entries())
    return ", ".join(one(entry) for entry in PATTERNS.entries()) + "; each sample's own edges: " + sample
