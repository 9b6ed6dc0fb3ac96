r"""Attention rollout (Abnar and Zuidema, 2020) along a relation's own edges, sparse.

How much does token j at the input contribute to node i after the stacked layers? Each layer
mixes its input two ways: attention (A, the heads averaged, rows summing to 1) and the residual
connection, which carries a node's own state through. Rollout counts both halves equally,

    A'_l = rownorm(0.5 A_l + 0.5 I)                   one layer, residual-mixed
    R    = A'_L ... A'_2 A'_1                         rollout: R[i, j] = share of input j in node i

so each row of R is a distribution over the input tokens. A'_l has the relation's edges plus a
self-loop per node: it is kept as a sparse (queries, keys) matrix, never dense.

Two ways to compute it:

* `rollout_matrix`: every query at once, as sparse products A'_L @ ... @ A'_1 (torch.sparse).
  Paths fill the product in: after enough layers of a window, or any layer of a global node, it
  is dense, so ask for it where N x N fits.
* `rollout_rows`: chosen queries only, as row vectors pushed down through the layers, x <- x A'_l
  (an index_add over the edges, as `graphformer.attention.torch_ops` sums messages): O(layers x E)
  per query and an (S, N) result, so it scales to thousands of nodes.

Through cross-attention (which source tokens an output token depends on). A decoder layer l is
self-attention S_l, then cross-attention C_l (m decoder queries over the encoder's output, heads
averaged, rows summing to 1), each with its residual. Track two shares of every decoder node:
T (m, m) on the decoder's inputs and X (m, n) on the source tokens; start T = I, X = 0; per layer

    T <- S'_l T,   X <- S'_l X                       self-attention, S'_l residual-mixed as above
    T <- 0.5 T,    X <- 0.5 X + 0.5 C_l R_enc        cross-attention: half kept, half read from the
                                                     encoder output, whose rows are R_enc's

and the answer is X after the top layer. Each row of [T | X] sums to 1: the cross-attention's
half of the mass flows to the source through the encoder's own rollout. This is our choice of
composition (Abnar and Zuidema treat one stack): it charges the cross step's residual the same
0.5 as every other layer's, and reads the encoder only at its top, where the decoder reads it.
`cross_rollout_matrix` computes it for every output token, `cross_rollout_rows` for chosen ones.
"""

from __future__ import annotations

import warnings

import torch

from graphformer.graphs import GraphBatch
from graphformer.viz.edge_maps import EdgeMaps, edge_maps, sublayer_maps


def mixed_layers(maps: EdgeMaps) -> list[torch.Tensor]:
    """A'_l = rownorm(0.5 A_l + 0.5 I) of each layer of a self-attention's ``maps``, heads
    averaged: sparse coalesced (N, N) float matrices, the relation's edges plus a self-loop each."""
    if maps.n_queries != maps.n_keys:
        raise ValueError(f"residual mixing needs a self-attention, not the {maps.n_queries} x {maps.n_keys} maps")
    n = maps.n_queries
    loops = torch.arange(n)
    rows, cols = torch.cat([maps.queries, loops]), torch.cat([maps.keys, loops])
    mixed = []
    for weights in maps.weights.mean(1):  # (E,) per layer
        values = torch.cat([0.5 * weights, weights.new_full((n,), 0.5)])
        mixed.append(_row_normalised(rows, cols, values, (n, n)))
    return mixed


def cross_layers(maps: EdgeMaps, n_source: int) -> list[torch.Tensor]:
    """C_l of each layer of cross-attention ``maps``, heads averaged and rows renormalised: sparse
    (m, ``n_source``) matrices, ``n_source`` the encoder's nodes (its tokens, then any span nodes)."""
    return [
        _row_normalised(maps.queries, maps.keys, weights, (maps.n_queries, n_source))
        for weights in maps.weights.mean(1)
    ]


def _row_normalised(rows, cols, values, size) -> torch.Tensor:
    """The sparse matrix of the entries (rows, cols, values), duplicates summed, each row divided by its sum."""
    totals = values.new_zeros(size[0]).index_add_(0, rows, values)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values / totals[rows], size).coalesce()


def rollout_matrix(layers: list[torch.Tensor]) -> torch.Tensor:
    """R = A'_L ... A'_1 of the bottom-first ``layers`` (sparse (N, N) each), as a sparse matrix."""
    product = layers[0]
    for layer in layers[1:]:
        product = _mm(layer, product)
    return product


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b of two sparse COO matrices, coalesced. torch multiplies them through CSR and warns,
    once, that CSR is in beta: a user of rollout did not ask for CSR, so the warning is not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse.mm(a, b).coalesce()


def rollout_rows(layers: list[torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    """Rows ``queries`` (S,) of R = A'_L ... A'_1: (S, N), pushed down one layer at a time."""
    rows = one_hot(queries, layers[-1].shape[0], layers[-1].dtype)
    for layer in reversed(layers):
        rows = times(rows, layer)
    return rows


def one_hot(queries: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(S, n) rows, row s all 0 but a 1 at ``queries[s]``."""
    rows = torch.zeros(len(queries), n, dtype=dtype)
    rows[torch.arange(len(queries)), queries] = 1.0
    return rows


def times(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """rows @ matrix for dense (S, Q) ``rows`` and a sparse (Q, K) ``matrix``, summed along its edges:
    (rows @ M)[s, k] = sum over entries (q, k) of rows[s, q] * M[q, k]."""
    (query, key), weight = matrix.indices(), matrix.values()
    out = rows.new_zeros(rows.shape[0], matrix.shape[1])
    return out.index_add_(1, key, rows[:, query] * weight)


def cross_rollout_matrix(encoder: list[torch.Tensor], decoder: list[torch.Tensor], cross: list[torch.Tensor]):
    """X (m, n) of the module docstring for every output token: ``encoder`` A'_l (n, n),
    ``decoder`` S'_l (m, m) and ``cross`` C_l (m, n), bottom layer first; sparse."""
    source = rollout_matrix(encoder)
    m, dtype = decoder[0].shape[0], decoder[0].dtype
    own = torch.sparse_coo_tensor(torch.arange(m).expand(2, m), torch.ones(m, dtype=dtype), (m, m))
    read = torch.sparse_coo_tensor(
        torch.empty(2, 0, dtype=torch.int64), torch.empty(0, dtype=dtype), (m, source.shape[1])
    )
    for self_attention, cross_attention in zip(decoder, cross, strict=True):
        own, read = _mm(self_attention, own), _mm(self_attention, read)
        own, read = 0.5 * own, (0.5 * read + 0.5 * _mm(cross_attention, source)).coalesce()
    return read


def cross_rollout_rows(encoder, decoder, cross, queries: torch.Tensor, keep=None) -> torch.Tensor:
    """Rows ``queries`` (S,) of `cross_rollout_matrix`: (S, n). From the top down, a row y of the
    decoder's shares passes 0.5 y C_l to the source at each cross step and 0.5 y on; the source
    shares gathered from every layer then go down the encoder once (R_enc is linear).

    ``keep``: per layer, (m,) the share each decoder node keeps at the cross step, where it is not
    the 0.5 above: 1 for a universal model's query that has halted (it reads nothing more, see
    `graphformer.viz.step_rollout`), whose row of C_l is empty."""
    m = decoder[-1].shape[0]
    keep = [torch.full((m,), 0.5, dtype=decoder[-1].dtype)] * len(decoder) if keep is None else keep
    shares = one_hot(queries, m, decoder[-1].dtype)
    reaching = shares.new_zeros(len(queries), cross[0].shape[1])
    for self_attention, cross_attention, kept in zip(reversed(decoder), reversed(cross), reversed(keep), strict=True):
        reaching += times(shares * (1 - kept), cross_attention)
        shares = times(shares * kept, self_attention)
    for layer in reversed(encoder):
        reaching = times(reaching, layer)
    return reaching


def rollout(
    model,
    batch: GraphBatch,
    sublayer: str = "enc",
    sample: int = 0,
    queries=None,
    *,
    dense: bool = True,
) -> torch.Tensor:
    """Attention rollout of ``sample`` after one forward pass of ``model`` over ``batch``.

    ``sublayer`` 'enc' or 'dec': the rollout of that self-attention stack, (queries, nodes);
    'cross': which source nodes each output token depends on, through the encoder, the decoder's
    self-attention and its cross-attention (the module docstring's X), (outputs, source nodes).
    ``queries``: None for every query, as a dense tensor (``dense=False``: a sparse one), or a
    list of query ids for those rows only, dense (S, nodes), O(layers x edges) each.
    """
    if sublayer == "cross":
        maps = sublayer_maps(model, batch, ("enc", "dec", "cross"), sample)
        encoder, decoder = mixed_layers(maps["enc"]), mixed_layers(maps["dec"])
        cross = cross_layers(maps["cross"], encoder[0].shape[0])
        if queries is not None:
            return cross_rollout_rows(encoder, decoder, cross, query_ids(queries, decoder[0].shape[0]))
        result = cross_rollout_matrix(encoder, decoder, cross)
    else:
        layers = mixed_layers(edge_maps(model, batch, sublayer, sample))
        if queries is not None:
            return rollout_rows(layers, query_ids(queries, layers[0].shape[0]))
        result = rollout_matrix(layers)
    return result.to_dense() if dense else result


def query_ids(queries, n: int) -> torch.Tensor:
    """``queries`` as an (S,) int64 tensor, each in range(n), else a ValueError naming the first outside."""
    ids = torch.as_tensor(queries, dtype=torch.int64).reshape(-1)
    outside = ids[(ids < 0) | (ids >= n)]
    if len(outside):
        raise ValueError(f"query {int(outside[0])} is not a node of the sample (0 to {n - 1})")
    return ids
