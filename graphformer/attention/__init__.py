"""Graph attention behind one entry point.

Six backends compute the same thing, each from a `graphformer.graphs.relation.Relation`:

* ``dgl``: edge-wise SDDMM/SpMM kernels, the message-passing formulation itself (on the devices
  the installed DGL was built for: PyPI's is CPU-only).
* ``torch``: the same four message-passing steps as PyTorch gathers and scatters; runs wherever
  PyTorch runs, so CUDA needs no CUDA build of DGL.
* ``blocked``: block-sparse tiles in plain PyTorch (BLAS matmuls, chunked, recomputed in the
  backward pass); much faster and leaner on long sequences with local patterns.
* ``padded``: one padded, masked dense matrix per sample (batched matmuls); the fastest for batches of
  short sentences, as in translation.
* ``flex``: the edges as a block mask for PyTorch's compiled FlexAttention (torch >= 2.5); it
  trains on CUDA and, on a CPU, serves forward passes without gradients (see
  `graphformer.attention.flex`).
* ``auto`` (default): `_auto` below picks one per call, by the rule `graphformer.catalog.AUTO_RULE`
  states (``padded.worth_it``, ``flex.worth_it``, ``blocked.worth_it``, ``dgl_ops.runs_on``, in that
  order).

Each backend is an entry of `graphformer.catalog.BACKENDS` (its name, summary, capabilities and
function); ``BACKENDS`` here is that registry, which maps each name to its function.

The backend is an argument: models hold its name (``model.attention_backend``) and pass it to
every call of `graph_attention`; layers never call a backend themselves.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from graphformer.attention import blocked, dgl_ops, flex, padded, torch_ops
from graphformer.attention.bias import EdgeBias
from graphformer.catalog import BACKENDS
from graphformer.choices import DEFAULT_BACKEND
from graphformer.errors import ConfigError, UserError
from graphformer.graphs.heterograph import HeteroGraph
from graphformer.graphs.relation import Relation


def _auto(relation: Relation, q, k, v, return_weights: bool = False, bias: EdgeBias | None = None):
    if padded.worth_it(relation, return_weights) and serves("padded", bias):
        attend = padded.attend
    elif serves("flex", bias) and flex.worth_it(relation, q, k, v, bias=bias):
        attend = flex.attend
    elif blocked.worth_it(relation) and serves("blocked", bias):
        attend = blocked.attend
    elif dgl_ops.runs_on(q.device):
        attend = dgl_ops.attend
    else:
        attend = torch_ops.attend
    return _call(attend, relation, q, k, v, return_weights, bias)


def _call(attend, relation: Relation, q, k, v, return_weights: bool, bias: EdgeBias | None):
    """``attend`` with ``bias`` only where there is one: a backend that serves none need not take it."""
    if bias is None:
        return attend(relation, q, k, v, return_weights=return_weights)
    return attend(relation, q, k, v, return_weights=return_weights, bias=bias)


def serves(name: str, bias: EdgeBias | None) -> bool:
    """Whether backend ``name`` can add ``bias`` to its scores (any backend serves no bias)."""
    if bias is None:
        return True
    return BACKENDS.entry(name).can(bias.capability)


def _check_serves(name: str, bias: EdgeBias | None) -> None:
    if not serves(name, bias):
        kind = "derived from positions" if bias.from_positions else "read from each edge's given type"
        able = [e.name for e in BACKENDS.entries() if serves(e.name, bias)]
        raise UserError(
            f"attention backend {name} cannot add a bias {kind} to its scores; choose one of {', '.join(able)}"
        )


def unavailable(name: str) -> str | None:
    """Why backend ``name`` cannot run with the installed stack (what to install or choose
    instead), or None where it can."""
    entry = BACKENDS.entry(name)
    if entry.can("needs-dgl") and dgl_ops.missing():
        return (
            f"{name} needs DGL, which cannot be imported here ({dgl_ops.missing()}); DGL 2.1.0 installs only beside "
            f"torch <= 2.2.1 on Python 3.11 (make install), or choose one of {', '.join(_usable())}"
        )
    if entry.can("needs-flex-attention"):
        return flex.unavailable()
    return None


def _usable() -> list[str]:
    """The backends that need nothing beyond torch."""
    optional = ("needs-dgl", "needs-flex-attention")
    return [e.name for e in sorted(BACKENDS.entries(), key=lambda e: e.name) if not any(map(e.can, optional))]


def check_backend(name: str) -> str:
    """``name`` if it names a backend that runs here; else a ValueError that lists the backends,
    or a `graphformer.errors.UserError` that says what the installed stack lacks."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}")
    why = unavailable(name)
    if why:
        raise UserError(f"attention backend {why}")
    return name


def check_backend_trains(name: str, device: torch.device) -> None:
    """A `graphformer.errors.ConfigError` before training starts when backend ``name`` cannot
    compute gradients on ``device`` (one ``trains-only-on-cuda``, such as ``flex`` on a CPU: torch's
    FlexAttention has no backward pass there, so it serves evaluation and decoding only)."""
    entry = BACKENDS.entry(name)
    if entry.can("trains-only-on-cuda") and torch.device(device).type != "cuda":
        why, *others, last = entry.details.get("why_cpu", "it has no backward pass"), *_usable()
        raise ConfigError(
            "attention_backend",
            f"{name} trains only on CUDA ({why} on {torch.device(device).type}); train with "
            f"{', '.join(others)} or {last} here, and evaluate or translate with {name}",
        )


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
    if (
        len(qs) == len(ks) == len(vs) == 3
        and qs[1:] == ks[1:] == vs[1:]
        and (qs[0], ks[0], vs[0]) == (relation.num_queries, relation.num_keys, relation.num_keys)
        and q.dtype == k.dtype == v.dtype
        and q.is_floating_point()
    ):
        return
    if not (q.dtype == k.dtype == v.dtype and q.is_floating_point()):
        raise ValueError(f"q, k and v must share one floating-point dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if len(qs) != 3 or len(ks) != 3 or len(vs) != 3:
        raise ValueError(
            f"q, k and v must be (nodes, heads, d) tensors, got shapes {tuple(qs)}, {tuple(ks)} and {tuple(vs)}"
        )
    if not qs[1:] == ks[1:] == vs[1:]:
        raise ValueError(
            f"q, k and v must have the same heads and head size, got {tuple(qs[1:])}, "
            f"{tuple(ks[1:])} and {tuple(vs[1:])}"
        )
    raise ValueError(
        f"the relation has {relation.num_keys} key and {relation.num_queries} query nodes, but "
        f"k, v and q hold {ks[0]}, {vs[0]} and {qs[0]}"
    )


def _check_every_query_has_keys(relation: Relation) -> None:
    """A ValueError naming the first query node without in-edges: a softmax over no keys has no
    value (one backend would give NaN, another 0)."""
    keyless = torch.bincount(relation.v, minlength=relation.num_queries) == 0
    if bool(keyless.any()):
        raise ValueError(
            f"query node {int(keyless.nonzero()[0])} has no in-edges: attention over no keys is "
            "undefined; give every query at least one key (a self-loop, or a global node)"
        )


def _check_no_duplicate_edges(relation: Relation) -> None:
    """A ValueError for a multigraph: a key listed twice for one query would count twice in the
    softmax of some backends and once in others (their tiles are masks)."""
    pairs = relation.v * relation.num_keys + relation.u
    repeated = len(pairs) - len(torch.unique(pairs))
    if repeated:
        raise ValueError(
            f"the graph lists {repeated} edge(s) twice (the same key and query): attention takes a key "
            "once per query; remove the duplicates, e.g. with dgl.to_simple(graph)"
        )


def _relation_of_graph(graph, device: torch.device) -> Relation:
    """The verified relation of a one-relation `HeteroGraph` or DGL graph, on ``device`` (the
    checks run where the graph is, the CPU for PyPI's DGL)."""
    if len(graph.canonical_etypes) != 1:
        raise ValueError(
            f"the graph has {len(graph.canonical_etypes)} relations (edge types); attention runs on one: "
            "pass graph[etype] (a DGL graph) or Relation.of_edges(*graph.edges(etype), ...)"
        )
    if isinstance(graph, HeteroGraph):
        ((utype, _, vtype),) = graph.canonical_etypes
        relation = Relation.of_edges(*graph.edges(), graph.num_nodes(utype), graph.num_nodes(vtype))
    else:
        relation = Relation.of_graph(graph)
    _check_every_query_has_keys(relation)
    _check_no_duplicate_edges(relation)
    return Relation.of_edges(
        relation.u, relation.v, relation.num_keys, relation.num_queries, device=device, verified=True
    )


def graph_attention(
    relation,
    q,
    k,
    v,
    backend: str = DEFAULT_BACKEND,
    return_weights: bool = False,
    name: str | None = None,
    bias: EdgeBias | None = None,
):
    """Attention of destination queries q (N_dst, H, d) over source keys/values (N_src, H, d)
    along the edges of ``relation``; returns (N_dst, H, d) [and (E, H, 1) weights].

    ``relation`` is a `Relation` (a single-relation `HeteroGraph` or DGL graph is read into one);
    ``backend`` names one of ``BACKENDS``; ``name`` ('enc', 'dec', 'cross') labels the call for
    `record_attention`; ``bias``, an `EdgeBias`, is added to each edge's score (recorded weights
    are those after it).
    """
    if not isinstance(relation, Relation):
        relation = _relation_of_graph(relation, q.device)
    if not relation.verified:  # a user's graph or relation (a pool's patterns are checked when it builds them)
        _check_every_query_has_keys(relation)
        _check_no_duplicate_edges(relation)
        relation.verified = True
    _check_shapes(relation, q, k, v)
    attend = BACKENDS[check_backend(backend)]
    _check_serves(backend, bias)
    if not (_recorders and name):
        return _call(attend, relation, q, k, v, return_weights, bias)
    out, weights = _call(attend, relation, q, k, v, True, bias)
    for records in _recorders:
        records.append((name, relation, weights.detach()))
    return (out, weights) if return_weights else out


__all__ = [
    "graph_attention",
    "record_attention",
    "check_backend",
    "check_backend_trains",
    "unavailable",
    "BACKENDS",
    "DEFAULT_BACKEND",
    "EdgeBias",
    "Relation",
]
