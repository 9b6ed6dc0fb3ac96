"""graphformer: the Transformer as message passing on DGL graphs.

Tokens are nodes; attention is a choice of edges. See README.md for a tour.

The names below load on first use, so that the command line answers ``--help`` without
importing torch and DGL.
"""

import os
from importlib import import_module

# DGL picks its tensor backend at import time and prints a warning when it must guess.
os.environ.setdefault("DGLBACKEND", "pytorch")

__version__ = "0.1.0"

_WHERE = {
    "PAD": "graphformer.vocab",
    "SOS": "graphformer.vocab",
    "EOS": "graphformer.vocab",
    "UNK": "graphformer.vocab",
    "SPECIALS": "graphformer.vocab",
    "Vocab": "graphformer.vocab",
    "GraphPool": "graphformer.graphs",
    "GraphBatch": "graphformer.graphs",
    "graph_attention": "graphformer.attention",
    "GraphTransformer": "graphformer.model",
    "make_model": "graphformer.model",
}


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_WHERE)
