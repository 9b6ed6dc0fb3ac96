r"""How far information travels through an attention pattern in a given number of layers.

One attention layer moves information along the pattern's edges, and the residual connection
keeps what a node already had, so node u's state after l layers can depend on node j's input
exactly when a walk of at most l edges leads from j to u:

    H_0 = I  (span nodes of a tree pattern also hear their tokens: their inputs are pooled from them)
    H_l = [(I + A) H_{l-1} > 0]          A[u, v] = 1 for every edge v -> u of the encoder relation

``H_l[u, j]`` says "after l layers, u has heard of j". An answer that joins two tokens, such as
associative recall's (the query key and the value stored under it), can only be computed by a
node that has heard of both. A mean readout adds the nodes' contributions without joining them,
so any node will do; a readout of one node (the closing `</s>`, or the `<cls>` node) needs the
answer there, so that node must have heard of both. So if a share ``p`` of the possible positions
of the queried value can meet the query in some node (or in the readout node), no training makes
the model more accurate than about ``p + (1 - p) / num_values``: elsewhere it can only guess.

    >>> from graphformer.graphs import GraphPool
    >>> meeting_share(GraphPool("window:4", targets=False), n_tokens=100, layers=2)   # 2 * 2 * 4 / 99
    0.1616...
"""

from __future__ import annotations

import torch

from graphformer.graphs.heterograph import HeteroGraph
from graphformer.graphs.pool import ENC, SPAN, SRC, GraphPool


def meeting_share(
    pool: GraphPool, n_tokens: int, layers: int, readout: int | None = None, graph: HeteroGraph | None = None
) -> float:
    """Share of the tokens before the last one whose information can meet the last token's (the
    recall query's) in some node after ``layers`` layers, for one sample of ``n_tokens`` tokens;
    with ``readout`` (a node id of the sample's graph, e.g. `readout_node`), in that node.
    ``graph``: the sample's graph where it has edges of its own (`GraphPool.with_sample_edges`).

    Rather than the whole (N, N) ``H_l``, two walks along the edge lists: forward from the query
    to every node that has heard of it, then backward from those (or from the readout node, if it
    has) to every node they heard of.
    """
    graph = graph or pool.graph(pool.source_positions(n_tokens), 0)
    keys, queries = graph.edges(etype=ENC)
    members, spans = graph.edges(etype=SPAN) if SPAN in graph.canonical_etypes else (keys[:0], keys[:0])
    first = int(pool.cls_node)  # node of token 0
    query = first + n_tokens - 1
    hears_query = torch.zeros(graph.num_nodes(SRC), dtype=torch.bool)
    hears_query[query] = True
    hears_query[spans[members == query]] = True  # a span's input is pooled from its tokens
    hears_query = _spread(hears_query, keys, queries, layers)
    if readout is not None:
        only = torch.zeros_like(hears_query)
        only[readout] = bool(hears_query[readout])
        hears_query = only
    met = _spread(hears_query, queries, keys, layers)  # backwards: whom those nodes heard of
    met[members[met[spans]]] = True
    return float(met[first:query].float().mean())


def readout_node(pool: GraphPool, n_tokens: int, pooling: str) -> int | None:
    """The node a classifier with this ``pooling`` reads its label from (`<cls>` or `</s>`), in
    one sample of ``n_tokens`` tokens; None for mean pooling, which reads every token node."""
    if pooling == "cls":
        return 0
    return int(pool.cls_node) + n_tokens if pooling == "last" else None


def _spread(nodes: torch.Tensor, senders: torch.Tensor, receivers: torch.Tensor, steps: int) -> torch.Tensor:
    """(N,) bool: ``nodes`` and every node reached from them by at most ``steps`` edges sender -> receiver."""
    for _ in range(steps):
        grown = nodes.clone()
        grown[receivers[nodes[senders]]] = True
        nodes = grown
    return nodes
