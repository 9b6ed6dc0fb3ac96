"""Graphs: attention patterns, the per-length graph pool and batched mini-batches."""

from graphformer.graphs import patterns
from graphformer.graphs.batch import GraphBatch, make_batch
from graphformer.graphs.pool import CROSS, DEC, ENC, SPAN, SRC, TGT, GraphPool

__all__ = ["patterns", "GraphPool", "GraphBatch", "make_batch", "ENC", "DEC", "CROSS", "SPAN", "SRC", "TGT"]
