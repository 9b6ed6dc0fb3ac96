"""graphformer: the Transformer as message passing on DGL graphs.

Tokens are nodes; attention is a choice of edges. See README.md for a tour.
"""
import os

# DGL picks its tensor backend at import time and prints a warning when it must guess.
os.environ.setdefault("DGLBACKEND", "pytorch")

from graphformer.vocab import PAD, SOS, EOS, UNK, SPECIALS, Vocab  # noqa: E402
from graphformer.graphs import GraphPool, GraphBatch  # noqa: E402
from graphformer.attention import graph_attention  # noqa: E402
from graphformer.model import GraphTransformer, make_model  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "PAD", "SOS", "EOS", "UNK", "SPECIALS", "Vocab",
    "GraphPool", "GraphBatch", "graph_attention",
    "GraphTransformer", "make_model",
]
