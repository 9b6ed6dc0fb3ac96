"""Heterographs as plain index tensors: the structure the pool builds and a batch joins.

A `HeteroGraph` holds what graph attention needs of a graph and nothing else:

    node_counts   {ntype: N}                 nodes of each type ('src', 'tgt')
    edges_of      {(utype, name, vtype): (u, v)}   (E,) int64 key and query node ids per etype
    pos           {ntype: (N,) int64}         each node's position in its sequence

Batching numbers the nodes sample by sample: sample b's node i of type t becomes
``offset_t(b) + i`` with ``offset_t(b) = sum_{c < b} N_t(c)``, and its edges are shifted alike, so
no edge crosses samples. That is all ``dgl.batch`` does for these graphs, and doing it here keeps
graphformer whole where DGL cannot be installed (current PyTorch, GPU machines). Where DGL is
installed, `HeteroGraph.to_dgl` gives the same graph as a DGL heterograph (positions as node data
``'pos'``), for DGL's own algorithms and message passing; `HeteroGraph.to_networkx` gives one
etype as a networkx graph.

The method names follow DGL's (``edges(etype)``, ``num_edges``, ``num_nodes``, ``in_degrees``,
``canonical_etypes``), so code written against a DGL heterograph reads these unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

import torch

Etype = tuple[str, str, str]


@dataclass(eq=False)
class HeteroGraph:
    """Node counts, edges and positions of one sample or of a batch of them (see the module)."""

    node_counts: dict[str, int]
    edges_of: dict[Etype, tuple[torch.Tensor, torch.Tensor]]
    pos: dict[str, torch.Tensor]
    edge_data: dict[Etype, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def canonical_etypes(self) -> list[Etype]:
        return list(self.edges_of)

    def etype(self, etype: Etype | str | None = None) -> Etype:
        """The canonical (utype, name, vtype) of an etype given by it or by its name ('enc'), or
        the graph's only etype."""
        if etype in self.edges_of:
            return etype
        named = [e for e in self.edges_of if etype is None or e[1] == etype]
        if len(named) != 1:
            raise KeyError(
                f"{'no' if named == [] else 'more than one'} etype {etype or ''} in this graph; it has "
                f"{', '.join(e[1] for e in self.edges_of)}: name one"
            )
        return named[0]

    def edges(self, etype: Etype | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, v): (E,) key and query node id of each edge of the etype."""
        return self.edges_of[self.etype(etype)]

    def num_edges(self, etype: Etype | str | None = None) -> int:
        """Edges of one etype, or of all of them."""
        if etype is None:
            return sum(len(u) for u, _ in self.edges_of.values())
        return len(self.edges(etype)[0])

    def num_nodes(self, ntype: str) -> int:
        return self.node_counts[ntype]

    def in_degrees(self, etype: Etype | str | None = None) -> torch.Tensor:
        """(N_vtype,) number of keys of each query node of the etype."""
        _, _, vtype = self.etype(etype)
        return torch.bincount(self.edges(etype)[1], minlength=self.node_counts[vtype])

    def to_dgl(self):
        """The same graph as a DGL heterograph on the CPU, positions in ``ndata['pos']`` (needs DGL)."""
        dgl = require_dgl("HeteroGraph.to_dgl")
        graph = dgl.heterograph(dict(self.edges_of), num_nodes_dict=dict(self.node_counts), idtype=torch.int64)
        for ntype, pos in self.pos.items():
            graph.nodes[ntype].data["pos"] = pos
        for etype, data in self.edge_data.items():
            graph.edges[etype].data.update(data)
        return graph

    def to_networkx(self, etype: Etype | str):
        """One etype as a networkx DiGraph: an edge (u, v) for key u and query v, node ids as here
        (the two ends are one node set for self-attention, key and query ids apart otherwise)."""
        import networkx as nx

        graph = nx.DiGraph()
        utype, _, vtype = self.etype(etype)
        graph.add_nodes_from(range(max(self.node_counts[utype], self.node_counts[vtype])))
        u, v = self.edges(etype)
        graph.add_edges_from(zip(u.tolist(), v.tolist()))
        return graph


def batch(graphs: Sequence[HeteroGraph]) -> HeteroGraph:
    """One graph of ``graphs`` side by side: nodes numbered sample by sample, edges shifted with them."""
    first = graphs[0]
    counts = {t: torch.tensor([g.node_counts[t] for g in graphs]) for t in first.node_counts}
    offsets = {t: torch.cumsum(c, 0) - c for t, c in counts.items()}
    edges_of = {}
    for etype in first.edges_of:
        utype, _, vtype = etype
        per_sample = [g.edges_of[etype] for g in graphs]
        sizes = torch.tensor([len(u) for u, _ in per_sample])
        u = torch.cat([u for u, _ in per_sample]) + torch.repeat_interleave(offsets[utype], sizes)
        v = torch.cat([v for _, v in per_sample]) + torch.repeat_interleave(offsets[vtype], sizes)
        edges_of[etype] = (u, v)
    edge_data = {
        etype: {name: torch.cat([g.edge_data[etype][name] for g in graphs]) for name in data}
        for etype, data in first.edge_data.items()
    }  # every graph of a batch carries the same names (GraphPool.batch checks features)
    return HeteroGraph(
        {t: int(c.sum()) for t, c in counts.items()},
        edges_of,
        {t: torch.cat([g.pos[t] for g in graphs]) for t in first.pos},
        edge_data,
    )


_DGL_MISSING = (
    "{what} needs DGL, which cannot be imported here ({why}); DGL 2.1.0 installs only beside "
    "torch <= 2.2.1 on Python 3.11 (the reference stack: make install)"
)


def dgl_missing() -> str | None:
    """Why DGL cannot be used here, or None where it imports (tried once)."""
    return _load_dgl()[1]


def require_dgl(what: str):
    """The dgl module, or a UserError naming ``what`` needed it and how to get it."""
    from graphformer.errors import UserError

    dgl, why = _load_dgl()
    if dgl is None:
        raise UserError(_DGL_MISSING.format(what=what, why=why))
    return dgl


@cache
def _load_dgl():
    """(dgl, None), or (None, why not)."""
    try:  # DGL beside a newer torch fails inside its import (a missing graphbolt library), not with ImportError
        import dgl
        import dgl.ops  # noqa: F401 - the dgl backend's kernels

        return dgl, None
    except Exception as err:  # noqa: BLE001
        first_line = (str(err).splitlines() or [""])[0]
        return None, f"{type(err).__name__}: {first_line}"[:160]


__all__ = ["HeteroGraph", "batch", "dgl_missing", "require_dgl"]
