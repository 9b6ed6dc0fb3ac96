r"""Attention flow (Abnar and Zuidema, 2020): max-flow through the layered graph of a stack.

Where rollout sums every path from input token j to node i (`graphformer.viz.attention_rollout`), flow asks
how much can pass at once when each edge carries at most its weight. The layered graph of L
layers over N nodes has a node (l, i) per layer l = 0..L and token i, and an edge

    (l - 1, j) -> (l, i)   of capacity A'_l[i, j] = rownorm(0.5 A_l + 0.5 I)[i, j]

for each edge of the relation and each self-loop (the residual), heads averaged, as rollout's.
Flow[q, j] is the value of a maximum flow from (0, j) to (L, q): one max-flow problem per
(query, input) pair, solved by networkx (Edmonds-Karp) on the part of the graph that reaches q.

Through cross-attention the layered graph is the encoder's, then per decoder layer a
self-attention step (decoder nodes to a middle copy, S'_l) and a cross step into the layer's
output: its own middle node at capacity 0.5 (the residual) and every encoder top node j at
0.5 C_l[i, j], the composition `graphformer.viz.attention_rollout` defines. Flow runs from each source
token at the encoder's bottom to a decoder output.

Cost. Edmonds-Karp is O(V E^2) per problem in the worst case; on these layered graphs, whose
paths are L edges long, a problem costs about its E edges. One call solves queries x inputs
problems, so its work is counted as queries x inputs x (layered-graph edges), and a call beyond
`FLOW_LIMIT` of it is refused (the limit is under a minute on one core): flow is for a handful of
output nodes of a short input (a formula, a sentence); rollout scales to thousands of nodes.
"""

from __future__ import annotations

import networkx as nx
import torch
from networkx.algorithms.flow import build_residual_network, edmonds_karp

from graphformer.graphs import GraphBatch
from graphformer.viz.attention_rollout import cross_layers, mixed_layers, query_ids
from graphformer.viz.edge_maps import edge_maps, sublayer_maps

FLOW_LIMIT = 10_000_000  # queries x inputs x layered-graph edges


def layered_graph(layers: list[torch.Tensor]) -> nx.DiGraph:
    """The layered graph of bottom-first residual-mixed ``layers`` (sparse (N, N) each): nodes
    ``(l, i)``, edges (l - 1, j) -> (l, i) with ``capacity`` A'_l[i, j]."""
    graph = nx.DiGraph()
    for level, layer in enumerate(layers, start=1):
        _connect(graph, layer, (level - 1,), (level,))
    return graph


def cross_layered_graph(encoder, decoder, cross, keep=None) -> nx.DiGraph:
    """The layered graph through cross-attention: nodes ``("enc", l, j)`` for the encoder's
    levels, ``("mid", l, i)`` after decoder layer l's self-attention and ``("dec", l, i)`` after
    its cross-attention (``("dec", 0, i)``: the decoder's inputs). ``keep``: per layer, (m,) the
    capacity of each middle node's edge up, where it is not 0.5 (`cross_rollout_rows`' keep)."""
    graph = nx.DiGraph()
    for level, layer in enumerate(encoder, start=1):
        _connect(graph, layer, ("enc", level - 1), ("enc", level))
    m = decoder[0].shape[0]
    keep = [torch.full((m,), 0.5, dtype=cross[0].dtype)] * len(decoder) if keep is None else keep
    for level, (self_attention, cross_attention, kept) in enumerate(zip(decoder, cross, keep, strict=True), start=1):
        _connect(graph, self_attention, ("dec", level - 1), ("mid", level))
        _connect(
            graph, torch.sparse_coo_tensor(torch.arange(m).expand(2, m), kept, (m, m)), ("mid", level), ("dec", level)
        )
        _connect(graph, 0.5 * cross_attention, ("enc", len(encoder)), ("dec", level))
    return graph


def _connect(graph: nx.DiGraph, matrix: torch.Tensor, below, above) -> None:
    """Edges (*below, j) -> (*above, i) of capacity matrix[i, j], for the entries of a sparse
    ``matrix``; ``below`` and ``above`` are the levels' labels, tuples."""
    matrix = matrix.coalesce()
    (rows, cols), values = matrix.indices().tolist(), matrix.values().tolist()
    graph.add_weighted_edges_from(
        (((*below, j), (*above, i), c) for i, j, c in zip(rows, cols, values)), weight="capacity"
    )


def flows_into(graph: nx.DiGraph, inputs: list, outputs: list) -> torch.Tensor:
    """(outputs, inputs) float64 values of the maximum flows from each input node to each output
    node of ``graph``; 0 where an input does not reach the output. Refused beyond `FLOW_LIMIT`."""
    work = len(outputs) * len(inputs) * graph.number_of_edges()
    if work > FLOW_LIMIT:
        raise ValueError(
            f"attention flow for {len(outputs)} output(s) from {len(inputs)} inputs over "
            f"{graph.number_of_edges():,} edges is {work:,} units of work, over the limit of {FLOW_LIMIT:,}: "
            "ask for fewer queries or a shorter input, or use rollout, which scales"
        )
    values = torch.zeros(len(outputs), len(inputs), dtype=torch.float64)
    for row, target in enumerate(outputs):
        reaching = nx.ancestors(graph, target)
        part = graph.subgraph(reaching | {target})
        residual = build_residual_network(part, "capacity")  # reset and reused by every source's problem
        for column, source in enumerate(inputs):
            if source in reaching:
                solved = edmonds_karp(part, source, target, capacity="capacity", residual=residual, value_only=True)
                values[row, column] = solved.graph["flow_value"]
    return values


def flow_rows(layers: list[torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    """(S, N) attention flow from every input token to each of ``queries`` at the top of ``layers``."""
    n, top = layers[0].shape[0], len(layers)
    return flows_into(layered_graph(layers), [(0, j) for j in range(n)], [(top, int(q)) for q in queries])


def cross_flow_rows(encoder, decoder, cross, queries: torch.Tensor, keep=None) -> torch.Tensor:
    """(S, n) attention flow from every source node to each decoder output of ``queries``
    (``keep``: `cross_layered_graph`'s)."""
    graph = cross_layered_graph(encoder, decoder, cross, keep)
    n, top = encoder[0].shape[0], len(decoder)
    return flows_into(graph, [("enc", 0, j) for j in range(n)], [("dec", top, int(q)) for q in queries])


def flow(model, batch: GraphBatch, sublayer: str = "enc", sample: int = 0, queries=None) -> torch.Tensor:
    """Attention flow of ``sample`` after one forward pass of ``model`` over ``batch``: (queries,
    nodes) for 'enc' or 'dec', (outputs, source nodes) for 'cross' (the composition through
    cross-attention). ``queries``: ids of the output nodes, None for all (within `FLOW_LIMIT`)."""
    if sublayer == "cross":
        maps = sublayer_maps(model, batch, ("enc", "dec", "cross"), sample)
        encoder, decoder = mixed_layers(maps["enc"]), mixed_layers(maps["dec"])
        cross = cross_layers(maps["cross"], encoder[0].shape[0])
        m = decoder[0].shape[0]
        return cross_flow_rows(encoder, decoder, cross, query_ids(range(m) if queries is None else queries, m))
    layers = mixed_layers(edge_maps(model, batch, sublayer, sample))
    n = layers[0].shape[0]
    return flow_rows(layers, query_ids(range(n) if queries is None else queries, n))
