"""Graph attention behind one entry point.

Four backends compute the same thing:

* ``dgl``: edge-wise SDDMM/SpMM kernels, the message-passing formulation itself.
* ``blocked``: block-sparse tiles in plain PyTorch (BLAS matmuls, chunked, recomputed in the
  backward pass); much faster and leaner on long sequences with local patterns.
* ``padded``: one masked dense tile per sample (batched matmuls); the fastest for batches of
  short sentences, as in translation. Graphs that are not relations of a batch use ``dgl``.
* ``auto`` (default): ``padded`` where at least a quarter of each per-sample tile is edges (full
  and causal attention on length-bucketed batches), the ``dgl`` kernels everywhere else (sparse
  patterns on longer sequences, the Universal Transformer's subgraphs of active nodes).


Layers call `graph_attention` and never the kernels themselves, so another
implementation (plain PyTorch scatter ops, say, for CUDA without a DGL CUDA build) can be
registered in ``BACKENDS`` and chosen with `set_backend` without touching the layers.
"""
from __future__ import annotations

from contextlib import contextmanager

from graphformer.attention import blocked, dgl_ops, padded



def _auto(graph, q, k, v, return_weights: bool = False):
    attend = padded.attend if padded.worth_it(graph) else dgl_ops.attend
    return attend(graph, q, k, v, return_weights=return_weights)


BACKENDS = {"auto": _auto, "dgl": dgl_ops.attend, "blocked": blocked.attend, "padded": padded.attend}
_active = {"name": "auto"}


def set_backend(name: str) -> None:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {sorted(BACKENDS)}")
    _active["name"] = name


@contextmanager
def use_backend(name: str):
    """``with use_backend("blocked"): ...`` - the backend for the block, restored afterwards."""
    previous = _active["name"]
    set_backend(name)
    try:
        yield
    finally:
        _active["name"] = previous


_recorders: list[list] = []


@contextmanager
def record_attention():
    """Collect ``(name, graph, weights)`` for every named attention call made inside the block;
    weights are (E, H, 1), normalised over each destination's in-edges."""
    records: list = []
    _recorders.append(records)
    try:
        yield records
    finally:
        _recorders.remove(records)


def graph_attention(graph, q, k, v, return_weights: bool = False, name: str | None = None):
    """Attention of destination queries q (N_dst, H, d) over source keys/values (N_src, H, d)
    along the edges of ``graph``; returns (N_dst, H, d) [and (E, H, 1) weights].

    ``name`` ('enc', 'dec', 'cross') labels the call for `record_attention`.
    """
    attend = BACKENDS[_active["name"]]
    if not (_recorders and name):
        return attend(graph, q, k, v, return_weights=return_weights)
    out, weights = attend(graph, q, k, v, return_weights=True)
    for records in _recorders:
        records.append((name, graph, weights.detach()))
    return (out, weights) if return_weights else out


__all__ = ["graph_attention", "record_attention", "set_backend", "use_backend", "BACKENDS"]
