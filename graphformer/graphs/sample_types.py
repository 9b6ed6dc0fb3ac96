r"""Edge types that come with each sample: a tree edge's role, hops in the sample's own graph, or
types given with its edges.

A positional derivation (`graphformer.graphs.edge_types`) is a function of two positions, which
attention computes where it runs. These depend on the sample's own graph (its ``parse-tree`` or
``edges``), so the graph pool computes them once per batch, one id for *every* edge of the etype
(the union of its length pattern and the sample's edges), and the batch's relation carries them as
``edge_types`` (`GraphPool(edge_types={"enc": "role"})`). Each is a `Given`, so attention reads
them as ids that came with the edges.

    role       the edge's place in the sample's tree, key -> query (the query reads the key):

               id  name           the key is ...
               0   self           the query itself
               1   parent-child   the query's parent in the tree
               2   child-parent   one of the query's children
               3   eos-token      `</s>` (the query is another node)
               4   token-eos      a node that `</s>` reads
               5   cls-token      the `<cls>` node of a classifier
               6   token-cls      a node that `<cls>` reads
               7   other          none of these (a window edge between cousins, a span node's)

               earlier rows win: `</s>`'s own loop is ``self``; `</s>` holds the top-level tokens,
               so their links to it are 3 and 4, not 1 and 2. The tree is the breadth-first tree of
               the sample's own edges (either direction) from `</s>` (then from the first node it
               does not reach): for ``parse-tree`` that is the parse tree itself. Encoder only.

    hops:K     d(key, query), the length of the shortest path between the ends in the sample's own
               edges taken as an undirected graph, clipped: ids 0..K, and K + 1 for farther or
               unreachable (a `<cls>` node or a span node is in no sample's edges). Graphormer's
               spatial encoding. Self-attention sub-layers (enc, dec) with a sample term only.

    given:T[,F]  ids 0..T-1 listed with the sample's edges (a typed edges file, or Python); an edge
               of the length pattern that the sample does not list gets id T, ``unlisted``. With
               F, each listed edge also carries F float features (zeros for unlisted edges).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphformer.errors import ConfigError, UserError, did_you_mean
from graphformer.graphs.edge_types import Given

ROLES = ("self", "parent-child", "child-parent", "eos-token", "token-eos", "cls-token", "token-cls", "other")
SELF, PARENT_CHILD, CHILD_PARENT, EOS_TOKEN, TOKEN_EOS, CLS_TOKEN, TOKEN_CLS, OTHER = range(len(ROLES))
MAX_HOPS = 254  # distances are kept as bytes, K + 1 the largest


@dataclass(frozen=True)
class TypedEdges:
    """One sample's own edges: (E,) key and query positions (or node ids), and what they carry:
    (E,) int64 type ids and (E, F) float features, each ``None`` where not given."""

    u: torch.Tensor
    v: torch.Tensor
    types: torch.Tensor | None = None
    features: torch.Tensor | None = None

    def shifted(self, key_shift: int, query_shift: int) -> TypedEdges:
        """The same edges with ``key_shift`` added to every key and ``query_shift`` to every query."""
        return TypedEdges(self.u + key_shift, self.v + query_shift, self.types, self.features)


@dataclass(frozen=True)
class SampleGraph:
    """What a per-sample derivation reads of one sample, in the sample's node ids: the etype's
    edges (u, v) to type, the sample's ``own`` edges, its ``nodes`` (the key node count) and where
    its `</s>` and `<cls>` nodes are (None: it has none)."""

    u: torch.Tensor
    v: torch.Tensor
    own: TypedEdges
    nodes: int
    eos: int | None = None
    cls: int | None = None


@dataclass(frozen=True)
class Roles(Given):
    """The role of each edge in the sample's tree (see the module)."""

    num_types: int = len(ROLES)

    @property
    def names(self) -> tuple[str, ...]:
        return ROLES

    def of_sample(self, sample: SampleGraph) -> torch.Tensor:
        u, v = sample.u, sample.v
        parent = tree_parents(sample.own.u, sample.own.v, sample.nodes, sample.eos)
        types = torch.full_like(u, OTHER)
        types[parent[u] == v] = CHILD_PARENT  # assigned from the weakest rule up, so earlier rows win
        types[parent[v] == u] = PARENT_CHILD
        for node, to_node, from_node in ((sample.cls, TOKEN_CLS, CLS_TOKEN), (sample.eos, TOKEN_EOS, EOS_TOKEN)):
            if node is not None:
                types[v == node] = to_node
                types[u == node] = from_node
        types[u == v] = SELF
        return types


@dataclass(frozen=True)
class Hops(Given):
    """Shortest-path distance in the sample's own graph, clipped at ``clip`` (see the module)."""

    clip: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        return (*map(str, range(self.clip + 1)), f">{self.clip}")

    def of_sample(self, sample: SampleGraph) -> torch.Tensor:
        return hop_distances(sample.u, sample.v, sample.own.u, sample.own.v, sample.nodes, self.clip)


@dataclass(frozen=True)
class GivenTypes(Given):
    """Types (and F features, where ``features`` is set) listed with the sample's edges; id
    ``declared`` for an edge the sample does not list."""

    declared: int = 0
    features: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (*map(str, range(self.declared)), "unlisted")

    def check(self, own: TypedEdges) -> None:
        """A ValueError, in the sample's positions, for edges without types, a type id outside
        0..T-1, or features of another width than the declared one."""
        if own.types is None:
            raise ValueError(
                f"its edges carry no types, and this relation's types are given ({self.declared} declared): "
                "give (u, v, types), (key, query, type) triples or a networkx graph with a 'type' on each edge"
            )
        bad = (own.types < 0) | (own.types >= self.declared)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise ValueError(
                f"edge {int(own.u[i])}-{int(own.v[i])} has type {int(own.types[i])}, outside the declared "
                f"types 0..{self.declared - 1}"
            )
        width = None if own.features is None else own.features.shape[1]
        if self.features is not None and width != self.features:
            shown = "none" if width is None else f"width {width}"
            raise ValueError(
                f"its edge features have {shown}, but given:{self.declared},{self.features} declares {self.features}"
            )

    def of_sample(self, sample: SampleGraph) -> torch.Tensor:
        types = torch.full_like(sample.u, self.declared)
        found, at = _lookup(sample)
        types[found] = sample.own.types[at]
        return types

    def features_of_sample(self, sample: SampleGraph) -> torch.Tensor | None:
        """(E, F) each edge's features, zeros for an edge the sample does not list; None without features."""
        if sample.own.features is None:
            return None
        features = sample.own.features.new_zeros(len(sample.u), sample.own.features.shape[1])
        found, at = _lookup(sample)
        features[found] = sample.own.features[at]
        return features


def _lookup(sample: SampleGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """(found, at): whether each edge (u, v) is one of the sample's own, and for those found, which
    (the first listed, for a pair listed twice)."""
    width = sample.nodes + 1  # more than any key id
    order = torch.sort(sample.own.v * width + sample.own.u, stable=True)
    wanted = sample.v * width + sample.u
    place = torch.searchsorted(order.values, wanted)
    found = place < len(order.values)
    found[found.clone()] = order.values[place[found]] == wanted[found]
    return found, order.indices[place[found]]


def role() -> Roles:
    return Roles()


def hops(clip: int) -> Hops:
    if not 1 <= clip <= MAX_HOPS:
        raise UserError(f"hops:{clip}: the clip K must be from 1 to {MAX_HOPS}")
    return Hops(clip + 2, clip)


def given(types: int, features: int | None = None) -> GivenTypes:
    if types < 1 or (features is not None and features < 1):
        raise UserError(f"given:{types}{'' if features is None else f',{features}'}: T and F must be at least 1")
    return GivenTypes(types + 1, types, features)


def parse_derivation(spec: str) -> Given:
    """The per-sample derivation a spec names: ``role``, ``hops:4``, ``given:3`` or ``given:3,8``. A
    UserError for an unknown name, wrong arguments, or a positional one (attention derives those)."""
    from graphformer.catalog import EDGE_TYPES
    from graphformer.graphs.patterns import arity

    name, _, args = spec.replace(" ", "").partition(":")
    per_sample = list(EDGE_TYPES.names("per-sample"))
    if name not in per_sample:
        if name in EDGE_TYPES:
            raise UserError(
                f"edge type {spec!r} is derived from positions where attention runs; the graph pool types edges "
                f"by the sample: {', '.join(per_sample)}"
            )
        raise UserError(f"unknown edge type {spec!r}{did_you_mean(name, EDGE_TYPES)}; known: {', '.join(EDGE_TYPES)}")
    allowed = arity(EDGE_TYPES.entry(name).details.get("arguments", ""))
    try:
        values = [int(a) for a in args.split(",")] if args else []
    except ValueError:
        raise UserError(f"edge type {spec!r}: arguments must be integers, e.g. hops:4") from None
    if len(values) not in allowed:
        raise UserError(f"edge type {spec!r}: {name} takes {' or '.join(map(str, allowed))} integer argument(s)")
    return EDGE_TYPES[name](*values)


def check_sublayer(derivation: Given, spec: str, sublayer: str, term: str | None) -> None:
    """A ConfigError where the sub-layer ``sublayer`` ('enc', 'dec', 'cross'), whose sample term is ``term``,
    cannot carry the derivation: roles are the encoder's; hops need the sample's own edges between
    nodes of one kind; given types need an ``edges`` term."""
    where = f"edge_types[{sublayer!r}]"
    if isinstance(derivation, Roles) and sublayer != "enc":
        raise ConfigError(where, f"{spec!r}: tree roles type the encoder's edges (enc) only")
    if isinstance(derivation, Hops) and (sublayer == "cross" or term is None):
        raise ConfigError(
            where, f"{spec!r}: hops count steps in a self-attention's own sample edges; add one, e.g. window:1+edges"
        )
    if isinstance(derivation, GivenTypes) and term != "edges":
        raise ConfigError(where, f"{spec!r}: given types come with the edges; use e.g. window:1+edges")


class Adjacency:
    """The edges u - v of a sample's own graph in both directions, loops dropped, as CSR rows: the
    neighbours of node x are ``b[starts[x]:starts[x + 1]]``."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor, nodes: int):
        keep = u != v
        a, b = torch.cat([u[keep], v[keep]]), torch.cat([v[keep], u[keep]])
        order = torch.argsort(a * nodes + b)
        self.b = b[order]
        self.starts = torch.searchsorted(a[order], torch.arange(nodes + 1))

    def step(self, at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(which, neighbour): every neighbour of each node of ``at``, and the index in ``at`` it came from."""
        degree = self.starts[at + 1] - self.starts[at]
        which = torch.repeat_interleave(torch.arange(len(at)), degree)
        rank = torch.arange(len(which)) - (torch.cumsum(degree, 0) - degree)[which]  # 0, 1, ... within a row
        return which, self.b[self.starts[at][which] + rank]


def tree_parents(u: torch.Tensor, v: torch.Tensor, nodes: int, root: int | None) -> torch.Tensor:
    """(nodes,) each node's parent in the breadth-first tree of the undirected edges u - v from
    ``root``, then from the first node with an edge that no earlier search reached; -1 for the roots
    and nodes without edges. Of several parents one level up, the first node wins.

    One level per step (a parse tree of ListOps is about ten levels deep), each step a few tensor
    operations on the level's edges."""
    adjacency = Adjacency(u, v, nodes)
    parent = torch.full((nodes,), -1, dtype=torch.int64)
    seen = torch.zeros(nodes, dtype=torch.bool)
    has_edge = adjacency.starts[1:] > adjacency.starts[:-1]
    frontier = torch.tensor([] if root is None else [root], dtype=torch.int64)
    while True:
        seen[frontier] = True
        while len(frontier):
            which, child = adjacency.step(frontier)
            new = ~seen[child]
            child, holder = child[new], frontier[which[new]]
            first = torch.full((nodes,), nodes, dtype=torch.int64).scatter_reduce(0, child, holder, "amin")
            frontier = torch.unique(child)
            parent[frontier], seen[frontier] = first[frontier], True
        left = (has_edge & ~seen).nonzero()[:, 0]
        if not len(left):
            return parent
        frontier = left[:1]


def hop_distances(
    u: torch.Tensor, v: torch.Tensor, own_u: torch.Tensor, own_v: torch.Tensor, nodes: int, clip: int
) -> torch.Tensor:
    """(E,) min(d(u[i], v[i]), clip + 1), d the shortest-path length in the undirected graph of
    the edges own_u - own_v on ``nodes`` nodes.

    A breadth-first search from every key at once, as (key, reached node) pairs: step k finds the
    nodes k hops from each key, written into a (nodes, nodes) table of distances (a sample of 2000
    nodes: 4 MB), and an edge is done when its query is among them. A key whose edges are all done
    stops searching, so a local pattern on a tree (``window:1+parse-tree``, whose edges are within 3
    hops) costs a few steps, whatever the clip."""
    far = clip + 1
    adjacency = Adjacency(own_u, own_v, nodes)
    table = torch.full((nodes, nodes), far, dtype=torch.uint8)  # bytes: filled ten times faster than int16
    key = torch.unique(u)
    table[key, key] = 0
    open_ = table[u, v] == far
    frontier_key, frontier_node = key, key
    for k in range(1, far):
        if not bool(open_.any()):
            break
        active = torch.zeros(nodes, dtype=torch.bool)
        active[u[open_]] = True
        frontier_key, frontier_node = frontier_key[active[frontier_key]], frontier_node[active[frontier_key]]
        which, node = adjacency.step(frontier_node)
        key = frontier_key[which]
        new = table[key, node] == far
        pairs = torch.unique(key[new] * nodes + node[new])  # a pair reached twice this step goes on once
        frontier_key, frontier_node = pairs // nodes, pairs % nodes
        table[frontier_key, frontier_node] = k
        open_ &= table[u, v] == far
    return table[u, v].long()


__all__ = [
    "ROLES",
    "TypedEdges",
    "SampleGraph",
    "Roles",
    "Hops",
    "GivenTypes",
    "role",
    "hops",
    "given",
    "parse_derivation",
    "check_sublayer",
    "tree_parents",
    "hop_distances",
]
