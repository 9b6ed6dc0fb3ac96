r"""Graph attention per sample: each sample's edges as one padded, masked dense matrix.

In a batch no edge crosses samples: sample b's keys are nodes [k_b, k_b + n_b) and its queries
[q_b, q_b + m_b). Padding every sample to (M, N) = (max m_b, max n_b) turns attention into two
batched matmuls at BLAS speed, masked to the edges:

    S_b = scale * Q_b K_b^T + B_b,   S_b[i, j] = -inf where there is no edge j -> i
    out_b = softmax(S_b) V_b                                   (B, H, M, N) work in all

where B_b is an edge bias (`graphformer.attention.bias.EdgeBias`: b_e at each edge's slot) or 0.

Only attention is padded: projections and feed-forward layers still run on the real nodes alone.
With length-bucketed batches of short sentences padding is small, so this is the fastest backend
for training; for long sequences with local patterns (most of each padded matrix empty) ``blocked`` is.

The layout comes from what the relation's builder knew (`graphformer.graphs.relation.Relation`):
per-sample key and query counts (a batch's relations, and the Universal Transformer's subgraphs of
active nodes), or one row of keys per query (incremental decoding). A relation with neither is
one sample: a single (N_dst, N_src) matrix, still exact, but only cheap when the relation is dense.
A grouped relation (`Relation.of_groups`: incremental decoding's full and causal attention) already
keeps each group's keys as one block of the key tensor, so its blocks are views: nothing is gathered,
and PyTorch's fused ``scaled_dot_product_attention`` reads the strided blocks in place. A batch's
relation of full attention (the encoder's, and training's cross-attention) is read the same way,
one fused call per stretch of consecutive samples of one size (`full_stretches`): length-bucketed batches
come sorted by length, so a few stretches cover a batch, and nothing is padded, gathered or masked.
A bias on groups and stretches comes as rows (`bias_rows`): query v against key first_key(v) + j,
the block it reads, computed from the two positions or scattered from each edge's given type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from graphformer.attention.bias import EdgeBias
from graphformer.graphs.relation import DenseGroups, Relation, sample_of

# Keys per group up to which one query's attention is cheaper as plain products than fused
# attention, whose fixed cost dominates on a CPU (timed in docs/results.md, Decoding). A GPU
# pays per kernel launch instead, and keeps the one fused call.
SHORT_SPAN = 12


class Segments:
    """Samples as rows of a padded layout.

    Attributes:
        key_index: (B, N) key node ids of each sample, -1 past its last key.
        query_slot: (N_dst,) where each query node sits in the (B * M) padded queries.
        key_gather: ``key_index`` with -1 read as node 0 (its scores are masked out).
        no_edge: (B, 1, M, N) True where no edge joins the padded query and key (padding rows,
            which have no edges at all, are left unmasked so their softmax stays finite).
        edge_at: (sample, query index, key index) of each edge, to read per-edge weights.
    """

    def __init__(
        self, key_index: torch.Tensor, query_slot: torch.Tensor, max_queries: int, mask: torch.Tensor, edge_at: tuple
    ):
        self.key_index, self.query_slot, self.max_queries = key_index, query_slot, max_queries
        self.key_gather = key_index.clamp(min=0)
        # Rows without keys (padding) attend to everything: finite, and their outputs are dropped.
        self.no_edge = ~(mask | ~mask.any(-1, keepdim=True))[:, None]
        self.edge_at = edge_at

    @classmethod
    def of_batch(cls, u, v, key_counts: torch.Tensor, query_counts: torch.Tensor) -> Segments:
        """Keys and queries numbered sample by sample, ``counts`` of each per sample."""
        key_sample, key_pos = _sample_and_index(key_counts)
        query_sample, query_pos = _sample_and_index(query_counts)
        _check_within_samples(key_sample[u], query_sample[v])
        size, n, m = len(key_counts), max(int(key_counts.max()), 1), max(int(query_counts.max()), 1)
        first = torch.cumsum(key_counts, 0) - key_counts
        columns = torch.arange(n, device=u.device)
        key_index = torch.where(columns < key_counts[:, None], first[:, None] + columns, -1)
        edge_at = (query_sample[v], query_pos[v], key_pos[u])
        mask = torch.zeros(size, m, n, dtype=torch.bool, device=u.device)
        mask[edge_at] = True
        return cls(key_index, query_sample * m + query_pos, m, mask, edge_at)

    @classmethod
    def of_rows(cls, key_index: torch.Tensor) -> Segments:
        """One query per row, attending to exactly the row's keys (edges listed row by row)."""
        mask = key_index >= 0
        edge_at = mask.nonzero(as_tuple=True)
        rows = torch.arange(len(key_index), device=key_index.device)
        return cls(key_index, rows, 1, mask[:, None], (edge_at[0], torch.zeros_like(edge_at[0]), edge_at[1]))


def _check_within_samples(key_sample: torch.Tensor, query_sample: torch.Tensor) -> None:
    """A ValueError if some edge's key and query (their samples given per edge) are in two samples."""
    if bool((key_sample != query_sample).any()):
        raise ValueError("an edge joins two samples; padded attention needs per-sample edges")


def _sample_and_index(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For nodes numbered sample by sample: each node's sample and its index inside the sample."""
    sample = sample_of(counts)
    first = torch.cumsum(counts, 0) - counts
    return sample, torch.arange(len(sample), device=counts.device) - first[sample]


def segments_of(relation: Relation) -> Segments:
    """The relation's padded layout (built once, kept with the relation)."""
    return relation.layout("padded", _build_segments)


def _build_segments(relation: Relation) -> Segments:
    if relation.key_rows is not None:
        return Segments.of_rows(relation.key_rows)
    if relation.key_counts is not None and relation.query_counts is not None:
        return Segments.of_batch(relation.u, relation.v, relation.key_counts, relation.query_counts)
    one = torch.ones(1, dtype=torch.int64, device=relation.device)
    return Segments.of_batch(relation.u, relation.v, one * relation.num_keys, one * relation.num_queries)


def worth_it(relation: Relation, return_weights: bool = False, max_waste: float = 4.0) -> bool:
    """Whether this backend suits the relation: groups or stretches it reads in place (`full_stretches`,
    unless the weights are asked for: those come from padded matrices), or padded matrices that hold at
    most ``max_waste`` slots per edge (dense patterns on similar lengths: yes; a window over long
    sequences: no). Decided once per relation: the counts may live on a GPU, and reading them
    waits for it."""
    if relation.groups is not None:  # read in place: the padding of uneven groups is all it wastes
        return True
    if not return_weights and full_stretches(relation) is not None:  # read in place, stretch by stretch: nothing padded
        return True
    return relation.layout(("padded pays", max_waste), lambda r: _padded_slots(r) <= max_waste * r.num_edges)


def _padded_slots(relation: Relation) -> int:
    if relation.num_edges == 0:
        return 1  # nothing to compute: never worth padding
    if relation.key_rows is not None:
        return relation.key_rows.numel()
    if relation.key_counts is not None and relation.query_counts is not None:
        keys, queries = relation.key_counts, relation.query_counts
        return len(keys) * int(keys.max()) * int(queries.max())
    return relation.num_keys * relation.num_queries


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(nodes, H, D) -> (B, H, N, D) rows of ``index`` (B, N)."""
    return x[index].transpose(1, 2)


@dataclass(frozen=True)
class Stretch:
    """``count`` consecutive samples of one size: ``keys`` keys and ``queries`` queries each, every
    query attending to all of its sample's keys. Nodes are numbered sample by sample, so the stretch's
    keys are the block of ``count * keys`` nodes from ``key_start``, read in place as (count, keys,
    H, d), and likewise its queries from ``query_start``."""

    key_start: int
    query_start: int
    count: int
    keys: int
    queries: int

    def groups(self, device: torch.device) -> DenseGroups:
        return DenseGroups(self.queries, self.keys, self.keys, device)


def full_stretches(relation: Relation, max_stretches_per_sample: float = 0.25) -> list[Stretch] | None:
    """A batch relation of full attention (each query attends to every key of its sample) as stretches
    of consecutive samples of one size, each attended in place by one fused call: no gather, no
    padding, no mask. Length-bucketed batches come sorted by length, so a few stretches cover them (one
    for samples of one length). None when some pair of a sample is not an edge (causal, windows:
    edges are unique, so full attention has sum(n_b * m_b) of them), or when sizes change so
    often (more than ``max_stretches_per_sample`` stretches per sample) that the calls' fixed cost would
    exceed one padded matrix's. Decided once per relation."""

    def build(r: Relation) -> list[Stretch] | None:
        keys, queries = r.key_counts, r.query_counts
        if keys is None or queries is None or r.key_rows is not None or len(keys) == 0:
            return None
        if r.num_edges != int((keys * queries).sum()):
            return None
        sizes, counts = torch.unique_consecutive(torch.stack([keys, queries], 1), dim=0, return_counts=True)
        if len(counts) > 1 and len(counts) > max_stretches_per_sample * len(keys):
            return None
        if bool(((sizes[:, 0] == 0) & (sizes[:, 1] > 0)).any()):  # queries without keys: the padded matrices' case
            return None
        # The count means full attention only if no edge crosses samples, as counts promise:
        # checked once, as the padded matrices check it.
        _check_within_samples(sample_of(keys)[r.u], sample_of(queries)[r.v])
        stretches, key_start, query_start = [], 0, 0
        for (n, m), count in zip(sizes.tolist(), counts.tolist()):
            stretches.append(Stretch(key_start, query_start, count, n, m))
            key_start, query_start = key_start + count * n, query_start + count * m
        return stretches

    return relation.layout(("full stretches", max_stretches_per_sample), build)


def bias_rows(relation: Relation, bias: EdgeBias, first_key: torch.Tensor, span: int, dtype) -> torch.Tensor:
    """(N_dst, span, H) bias of query v against key first_key[v] + j, j < span: the block of keys a
    group or stretch reads for v. 0 (or any finite value) in slots that are no edge: they are masked.

    A bias from positions is computed for every slot from the two nodes' positions (no edges are
    built); a given type lives on its edge, so each edge's b is scattered to its slot."""
    queries = torch.arange(relation.num_queries, device=first_key.device)
    if bias.from_positions:
        heads = torch.arange(bias.num_heads, device=first_key.device)
        keys = (first_key[:, None] + torch.arange(span, device=first_key.device)).clamp(max=relation.num_keys - 1)
        return bias.score(relation, queries[:, None, None], keys[..., None], heads).to(dtype)
    rows = torch.zeros(relation.num_queries, span, bias.num_heads, dtype=dtype, device=first_key.device)
    u, v = relation.edges()
    return rows.index_put((v, u - first_key[v]), bias.per_edge(relation, dtype))


def _group_bias(relation: Relation, bias: EdgeBias | None, dtype) -> torch.Tensor | None:
    """`bias_rows` of a grouped relation: query i reads the keys from (i // queries) * width."""
    if bias is None:
        return None
    groups = relation.groups
    group = torch.arange(relation.num_queries, device=groups.device) // groups.queries
    return bias_rows(relation, bias, group * groups.width, groups.span, dtype)


def _stretch_bias(relation: Relation, bias: EdgeBias | None, dtype) -> torch.Tensor | None:
    """`bias_rows` of a batch relation: a query reads its sample's keys, as many as the most of any sample."""
    if bias is None:
        return None
    first = torch.cumsum(relation.key_counts, 0) - relation.key_counts
    return bias_rows(relation, bias, first[sample_of(relation.query_counts)], int(relation.key_counts.max()), dtype)


def _attend_stretches(relation: Relation, stretches: list[Stretch], q, k, v, rows=None):
    """Full attention stretch by stretch: each stretch's queries against its samples' key blocks, in
    place; ``rows`` (N_dst, max keys, H) is the bias (`_stretch_bias`) or None."""
    out = []
    for stretch in stretches:
        if stretch.queries:  # a stretch without queries (no targets) has nothing to compute
            keys = slice(stretch.key_start, stretch.key_start + stretch.count * stretch.keys)
            queries = slice(stretch.query_start, stretch.query_start + stretch.count * stretch.queries)
            b = None if rows is None else rows[queries, : stretch.keys]
            out.append(_attend_groups(relation, stretch.groups(q.device), q[queries], k[keys], v[keys], False, b))
    return out[0] if len(out) == 1 else torch.cat(out)


def _blocks(x: torch.Tensor, groups: DenseGroups) -> torch.Tensor:
    """(B, span, H, D) view of the node tensor x (N, H, D): group b's keys are the nodes
    b * width + j, j < span (a decoding step makes four per layer)."""
    return x.view(-1, groups.width, *x.shape[1:])[:, : groups.span]


def _attend_groups(relation: Relation, groups: DenseGroups, q, k, v, return_weights: bool, rows=None):
    """Attention over groups: m queries per group against the group's block of keys, read in place
    (strided views of the key and value tensors, nothing gathered); ``rows`` (queries, span, H) is
    the bias of each query's block (`bias_rows`) or None."""
    K, V = _blocks(k, groups), _blocks(v, groups)  # (B, span, H, D)
    short = groups.span <= SHORT_SPAN and q.device.type == "cpu"
    if groups.queries == 1 and not return_weights and (groups.padding is not None or short):
        # One query per group (greedy decoding), of uneven length (cross-attention) or short (the
        # first steps' self-attention): broadcast products read the blocks in order, twice as fast
        # on a CPU as a masked batched matmul, and faster than fused attention's fixed cost.
        scores = (K * q[:, None]).sum(-1).mul_(1.0 / math.sqrt(q.shape[-1]))
        if rows is not None:
            scores = scores + rows
        if groups.padding is not None:
            scores.masked_fill_(groups.padding.view(q.shape[0], -1, 1), float("-inf"))
        return (torch.softmax(scores, dim=1)[..., None] * V).sum(1)
    Q = q.view(-1, groups.queries, *q.shape[1:]).transpose(1, 2)  # (B, H, m, D)
    K, V = K.transpose(1, 2), V.transpose(1, 2)  # (B, H, span, D)
    if rows is not None:
        rows = rows.view(Q.shape[0], groups.queries, groups.span, -1).permute(0, 3, 1, 2)  # (B, H, m, span)
    if groups.padding is None and not return_weights and rows is None:  # fused attention reads the strided blocks
        return F.scaled_dot_product_attention(Q, K, V).transpose(1, 2).reshape(q.shape)  # scales by 1/sqrt(d) itself
    # Several queries per group of uneven length, or a bias: masked batched matmuls (fused attention
    # is slow with a mask on a CPU).
    scores = (Q @ K.transpose(-1, -2)).mul_(1.0 / math.sqrt(q.shape[-1]))
    if rows is not None:
        scores = scores + rows
    if groups.padding is not None:
        scores.masked_fill_(groups.padding, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ V).transpose(1, 2).reshape(q.shape)
    if not return_weights:
        return out
    rows = relation.key_rows  # edges are listed query by query, keys in order: the unmasked entries
    per_query = weights.permute(0, 2, 3, 1).reshape(len(rows), rows.shape[1], -1)
    return out, per_query[rows >= 0][..., None]


def attend(relation: Relation, q, k, v, return_weights: bool = False, bias: EdgeBias | None = None):
    """Same contract as `graphformer.attention.dgl_ops.attend`."""
    if relation.num_queries == 0:  # e.g. the decoder of a batch without targets: nothing to pad
        return (q.new_zeros(q.shape), q.new_zeros(0, q.shape[1], 1)) if return_weights else q.new_zeros(q.shape)
    if relation.groups is not None:
        return _attend_groups(relation, relation.groups, q, k, v, return_weights, _group_bias(relation, bias, q.dtype))
    stretches = None if return_weights else full_stretches(relation)  # weights come back in edge order below
    if stretches is not None:
        return _attend_stretches(relation, stretches, q, k, v, _stretch_bias(relation, bias, q.dtype))
    seg = segments_of(relation)
    size, m = len(seg.key_index), seg.max_queries
    if m == 1 and len(q) == size:  # one query per row (decoding): nothing to pad
        Q = q[:, :, None]
    else:
        Q = q.new_zeros(size * m, *q.shape[1:])
        Q[seg.query_slot] = q
        Q = Q.view(size, m, *q.shape[1:]).transpose(1, 2)
    K, V = _gather(k, seg.key_gather), _gather(v, seg.key_gather)
    scores = (Q @ K.transpose(-1, -2)).mul_(1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:  # each edge's b at its slot; the slots of no edge are masked next
        b, i, j = seg.edge_at
        scores[b, :, i, j] += bias.per_edge(relation, q.dtype)
    weights = torch.softmax(scores.masked_fill_(seg.no_edge, float("-inf")), dim=-1)
    out = (weights @ V).transpose(1, 2).reshape(-1, *q.shape[1:])[seg.query_slot]
    if return_weights:
        b, i, j = seg.edge_at
        return out, weights.permute(0, 2, 3, 1)[b, i, j][..., None]
    return out
