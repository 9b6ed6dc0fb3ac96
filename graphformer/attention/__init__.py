"""Graph attention behind one entry point.

Five backends compute the same thing, each from a `graphformer.graphs.relation.Relation`:

* ``dgl``: edge-wise SDDMM/SpMM kernels, the message-passing formulation itself (on the devices
  the installed DGL was built for: PyPI's is CPU-only).
* ``torch``: the same four message-passing steps as PyTorch gathers and scatters; runs wherever
  PyTorch runs, so CUDA needs no CUDA build of DGL.
* ``blocked``: block-sparse tiles in plain PyTorch (BLAS matmuls, chunked, recomputed in the
  backward pass); much faster and leaner on long sequences with local patterns.
* ``padded``: one masked dense tile per sample (batched matmuls); the fastest for batches of
  short sentences, as in translation.
* ``auto`` (default): ``padded`` where it reads full attention run by run (`padded.full_runs`,
  unless the weights are asked for) or where edges fill at least a quarter of the batch's tiles
  (one per sample, padded to the longest: full and causal attention on length-bucketed batches);
  ``blocked`` on long relations (1024 queries or more) whose edges fill at least a quarter of the
  64 x 64 tiles they touch (windows, blocks); elsewhere the ``dgl`` kernels where they can run on
  the tensors' device, else ``torch``.

The backend is an argument: models hold its name (``model.attention_backend``) and pass it to
every call of `graph_attention`; layers never call a backend themselves.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from graphformer.attention import blocked, dgl_ops, padded, torch_ops
from graphformer.graphs.relation import Relation


def _auto(relation: Relation, q, k, v, return_weights: bool = False):
    if padded.worth_it(relation, return_weights):
        attend = padded.attend
    elif blocked.worth_it(relation):
        attend = blocked.attend
    elif dgl_ops.runs_on(q.device):
        attend = dgl_ops.attend
    else:
        attend = torch_ops.attend
    return attend(relation, q, k, v, return_weights=return_weights)


BACKENDS = {"auto": _auto, "dgl": dgl_ops.attend, "torch": torch_ops.attend, "blocked": blocked.attend,
            "padded": padded.attend}
DEFAULT_BACKEND = "auto"


def check_backend(name: str) -> str:
    """``name`` if it names a backend, else a ValueError that lists them."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}")
    return name


# Recording stays a context (a module-level list of open recorders): threading a recorder
# through every layer's call would widen each signature for an inspection-only feature.
_recorders: list[list] = []


@contextmanager
def record_attention():
    """Collect ``(name, relation, weights)`` for every named attention call made inside the
    block; weights are (E, H, 1), normalised over each destination's in-edges."""
    records: list = []
    _recorders.append(records)
    try:
        yield records
    finally:
        _recorders.remove(records)


def _check_shapes(relation: Relation, q, k, v) -> None:
    """A ValueError naming the mismatch, before any backend meets it deep inside torch or DGL.
    Called by every attention call of every decoding step: the usual case is one comparison of shapes."""
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) == len(ks) == len(vs) == 3 and qs[1:] == ks[1:] == vs[1:] and \
            (qs[0], ks[0], vs[0]) == (relation.num_queries, relation.num_keys, relation.num_keys) and \
            q.dtype == k.dtype == v.dtype and q.is_floating_point():
        return
    if not (q.dtype == k.dtype == v.dtype and q.is_floating_point()):
        raise ValueError(f"q, k and v must share one floating-point dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if len(qs) != 3 or len(ks) != 3 or len(vs) != 3:
        raise ValueError(f"q, k and v must be (nodes, heads, d) tensors, got shapes {tuple(qs)}, "
                         f"{tuple(ks)} and {tuple(vs)}")
    if not qs[1:] == ks[1:] == vs[1:]:
        raise ValueError(f"q, k and v must have the same heads and head size, got {tuple(qs[1:])}, "
                         f"{tuple(ks[1:])} and {tuple(vs[1:])}")
    raise ValueError(f"the relation has {relation.num_keys} key and {relation.num_queries} query nodes, but "
                     f"k, v and q hold {ks[0]}, {vs[0]} and {qs[0]}")


def _check_every_query_has_keys(relation: Relation) -> None:
    """A ValueError naming the first query node without in-edges: a softmax over no keys has no
    value (one backend would give NaN, another 0)."""
    keyless = torch.bincount(relation.v, minlength=relation.num_queries) == 0
    if bool(keyless.any()):
        raise ValueError(f"query node {int(keyless.nonzero()[0])} has no in-edges: attention over no keys is "
                         "undefined; give every query at least one key (a self-loop, or a global node)")


def _check_no_duplicate_edges(relation: Relation) -> None:
    """A ValueError for a multigraph: a key listed twice for one query would count twice in the
    softmax of some backends and once in others (their tiles are masks)."""
    pairs = relation.v * relation.num_keys + relation.u
    repeated = len(pairs) - len(torch.unique(pairs))
    if repeated:
        raise ValueError(f"the graph lists {repeated} edge(s) twice (the same key and query): attention takes a key "
                         "once per query; remove the duplicates, e.g. with dgl.to_simple(graph)")


def graph_attention(relation, q, k, v, backend: str = DEFAULT_BACKEND, return_weights: bool = False,
                    name: str | None = None):
    """Attention of destination queries q (N_dst, H, d) over source keys/values (N_src, H, d)
    along the edges of ``relation``; returns (N_dst, H, d) [and (E, H, 1) weights].

    ``relation`` is a `Relation` (a single-relation DGL graph is read into one);
    ``backend`` names one of ``BACKENDS``; ``name`` ('enc', 'dec', 'cross') labels the call for
    `record_attention`.
    """
    if not isinstance(relation, Relation):
        if len(relation.canonical_etypes) != 1:
            raise ValueError(f"the graph has {len(relation.canonical_etypes)} relations (edge types); attention runs "
                             "on one: pass graph[etype]")
        relation = Relation.of_graph(relation)
    if not relation.verified:  # a user's graph or relation (a pool's patterns are checked when it builds them)
        _check_every_query_has_keys(relation)
        _check_no_duplicate_edges(relation)
        relation.verified = True
    _check_shapes(relation, q, k, v)
    attend = BACKENDS[check_backend(backend)]
    if not (_recorders and name):
        return attend(relation, q, k, v, return_weights=return_weights)
    out, weights = attend(relation, q, k, v, return_weights=True)
    for records in _recorders:
        records.append((name, relation, weights.detach()))
    return (out, weights) if return_weights else out


__all__ = ["graph_attention", "record_attention", "check_backend", "BACKENDS", "DEFAULT_BACKEND", "Relation"]
