"""The graph pool: one heterograph per (source length, target length), built on demand.

Each graph has two node types and three etypes (DGL's canonical edge types, one per attention
sub-layer, named by the middle string: 'enc', 'dec', 'cross'):

    node types   'src' (n source tokens)        'tgt' (m target tokens)
    etypes       ('src', 'enc',   'src')        encoder self-attention   (full: n^2 edges)
                 ('tgt', 'dec',   'tgt')        decoder self-attention   (causal: m(m+1)/2)
                 ('src', 'cross', 'tgt')        encoder-decoder attention (full: n*m)

One heterograph rather than three graphs keeps the node ids of a sample consistent across its
etypes and lets `graphformer.graphs.heterograph.batch` offset all of them in one call. The
graphs are graphformer's own index tensors (`HeteroGraph`), on every stack; ``to_dgl()`` gives
the DGL heterograph where DGL is installed. Node features hold positions;
token ids are per sample and are attached after batching.

Which edges each etype has is an attention pattern (`graphformer.graphs.patterns`);
the defaults give the original Transformer. A tree encoder pattern (`graphformer.graphs.tree`)
adds span nodes after each sample's n source tokens and a fourth etype, ('src', 'span', 'src'),
from every token to the spans that hold it, which builds the span nodes' inputs.

A sub-layer may also take each sample's own edges (``parse-tree``, ``edges``, alone or joined to
length patterns: `graphformer.graphs.sample_edges`). The cached graph then holds the length
part, and `GraphPool.batch` joins each sample's edges to its copy; those graphs are not cached.

An encoder classifier's pool (``targets=False``) builds source graphs only (m = 0: the decoder's
etypes have no edges) and, with ``cls_node``, gives every source a global `<cls>` node in front of
its tokens: the encoder pattern becomes ``PATTERN+global:1``, so the first node reads every token
and every token reads it. Those are edges like any others; no code treats the node specially.

With ``edge_types`` ({sub-layer name: spec}), the pool also gives every edge of that etype a type
id that depends on the sample's own graph (a tree edge's ``role``, ``hops:K`` in the sample's
graph, types ``given:T`` with the edges: `graphformer.graphs.sample_types`), computed as it
joins each sample's edges (or once for a cached length graph) and carried in the graph's
``edge_data``, so that the batch's relation has them as ``edge_types`` and ``edge_features``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache

import torch

from graphformer.errors import ConfigError, UserError
from graphformer.graphs import heterograph, patterns, sample_edges, sample_types, tree
from graphformer.graphs.edges import EdgeList, unique_pairs
from graphformer.graphs.heterograph import HeteroGraph
from graphformer.graphs.patterns import Pattern
from graphformer.graphs.sample_types import SampleGraph, TypedEdges
from graphformer.graphs.typed_edges import as_typed_edges

SRC, TGT = "src", "tgt"
ENC = (SRC, "enc", SRC)
DEC = (TGT, "dec", TGT)
CROSS = (SRC, "cross", TGT)
SPAN = (SRC, "span", SRC)


def _as_pattern(p: Pattern | str) -> tuple[Pattern | None, str | None]:
    """The length pattern of a spec or function (None: the spec has sample terms only) and its sample term."""
    if isinstance(p, str):
        if not p.strip():
            return patterns.parse(p), None  # its own message
        length, sample = sample_edges.split_spec(p)
        return (None if length is None else patterns.parse(length)), sample
    if not callable(p):
        raise ValueError(
            f"an attention pattern is a spec string such as 'window:8' or a function (n_keys, "
            f"n_queries) -> (u, v), not {p!r}"
        )
    return p, None


def _edge_list(edges, name: str) -> EdgeList:
    """A pattern's (u, v): two 1-D integer tensors of one length, or a UserError saying so."""
    if not (isinstance(edges, tuple) and len(edges) == 2 and all(isinstance(e, torch.Tensor) for e in edges)):
        raise UserError(f"attention pattern {name!r} must return (u, v), two tensors; got {type(edges).__name__}")
    u, v = edges
    if u.dim() != 1 or v.dim() != 1 or len(u) != len(v):
        raise UserError(
            f"attention pattern {name!r} must return two 1-D tensors of one length, got shapes "
            f"{tuple(u.shape)} and {tuple(v.shape)}"
        )
    whole = (torch.int8, torch.int16, torch.int32, torch.int64)  # not bool, not float: never truncated
    if u.dtype not in whole or v.dtype not in whole:
        raise UserError(f"attention pattern {name!r} must return integer node ids, got {u.dtype} and {v.dtype}")
    return u.long(), v.long()


class GraphPool:
    """Builds and caches the per-length graphs of one attention structure.

    Args:
        enc: encoder self-attention pattern (a spec string such as ``"window:8"`` or a function).
        dec: decoder self-attention pattern; must be causal.
        cross: source -> target pattern.
        cache_edges: how many edges the cached (n, m) graphs may hold together (see `GraphCache`).
        targets: False for a classifier: samples have one label and no target nodes (see
            `graphformer.graphs.batch.make_batch`).
        cls_node: put a global `<cls>` node before each source's tokens (classifiers only): the
            encoder pattern gets the term ``global:1``.
        edge_types: a per-sample edge type for some sub-layers, {"enc": "role", "dec": "hops:4",
            "cross": "given:3"} (`graphformer.graphs.sample_types`; a derivation object will do).
    """

    def __init__(
        self,
        enc: Pattern | str = "full",
        dec: Pattern | str = "causal",
        cross: Pattern | str = "full",
        cache_edges: int = 2**24,
        targets: bool = True,
        cls_node: bool = False,
        edge_types: Mapping[str, str] | None = None,
    ):
        if cls_node and targets:
            raise ValueError("a <cls> node serves classifiers only: give targets=False with cls_node=True")
        self.targets, self.cls_node = targets, cls_node
        (self.enc, enc_term), (self.dec, dec_term), (self.cross, cross_term) = map(_as_pattern, (enc, dec, cross))
        # The etypes that take each sample's own edges, and the term that names where they come from.
        self.sample_terms = {r: t for r, t in ((ENC, enc_term), (DEC, dec_term), (CROSS, cross_term)) if t}
        self.edge_types = _edge_types(edge_types or {}, self.sample_terms)  # {etype: derivation}
        if cls_node:  # node 0 of every source is <cls>: it reads every token and every token reads it
            cls = patterns.global_tokens(1)
            self.enc = cls if self.enc is None else patterns.union(self.enc, cls)
        for (_, name, _), term in self.sample_terms.items():
            serves = sample_edges.DERIVED_FOR.get(term, name)
            if serves != name:
                raise ConfigError(
                    f"{name}_attention",
                    f"{term} is derived from the source's tokens for {serves}_attention only; "
                    f"give {name}_attention its own edges with 'edges'",
                )
        for sublayer, pattern in (("dec", self.dec), ("cross", self.cross)):
            if pattern is not None and patterns.adds_span_nodes(pattern):
                raise ConfigError(
                    f"{sublayer}_attention",
                    f"{pattern.spec!r}: tree patterns add span nodes to the "
                    "source and serve the encoder's self-attention (enc_attention) only",
                )
        self.has_spans = self.enc is not None and patterns.adds_span_nodes(self.enc)
        self.cross_is_full = self.cross is patterns.full and CROSS not in self.sample_terms
        self.graph = GraphCache(self._build, cache_edges)
        self.incoming = lru_cache(maxsize=4096)(self._incoming)  # one row of key ids per entry
        self.keyless = lru_cache(maxsize=4096)(self._keyless)  # checked for every sample's own edges
        self._edges(DEC, 8, 8)  # a decoder pattern that is not causal fails now, not at the first batch

    @property
    def decodable(self) -> bool:
        """Whether outputs can be decoded a token at a time: not where the decoder or cross
        attention takes edges given with each sample, which are known only for a whole target
        (a structure derived from the source, such as ``operands``, is made a query at a time)."""
        return all(etype == ENC or not sample_edges.is_given(term) for etype, term in self.sample_terms.items())

    def source_positions(self, tokens: int) -> int:
        """Positions a source of ``tokens`` tokens takes: its tokens, `</s>` and the `<cls>` node if any."""
        return tokens + 1 + self.cls_node

    def source_nodes(self, tokens: int) -> int:
        """Encoder nodes of a source of ``tokens`` tokens: its positions and the span nodes of a tree pattern."""
        positions = self.source_positions(tokens)
        return positions + self.span_nodes(positions)

    def target_nodes(self, target_tokens: int) -> int:
        """Decoder nodes of a target of ``target_tokens`` tokens: `<s>` and its tokens (none for a classifier)."""
        return target_tokens + 1 if self.targets else 0

    def gold_count(self, target_tokens: int) -> int:
        """Entries of a batch's gold a sample adds: its target tokens and `</s>`, or one label."""
        return target_tokens + 1 if self.targets else 1

    def span_nodes(self, n: int) -> int:
        """Span nodes the encoder pattern adds to a source of n tokens (0 but for tree patterns)."""
        return tree.span_count(n) if self.has_spans else 0

    def _edges(self, etype, n_keys: int, n_queries: int) -> EdgeList:
        pattern = {ENC: self.enc, DEC: self.dec, CROSS: self.cross}[etype]
        if n_queries == 0 or pattern is None:  # None: the sample's own edges alone, `with_sample_edges` adds them
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty
        name = getattr(pattern, "spec", getattr(pattern, "__name__", "custom"))
        u, v = _edge_list(pattern(n_keys, n_queries), name)
        if etype == ENC:  # span nodes are keys and queries too
            n_keys = n_queries = n_keys + self.span_nodes(n_keys)
        if etype == DEC and bool((u > v).any()):
            raise UserError(
                f"decoder self-attention pattern {name!r} has an edge from a later target token; "
                "use a causal one (causal, causal-window:W, ...)"
            )
        if len(u) and (int(u.min()) < 0 or int(u.max()) >= n_keys or int(v.min()) < 0 or int(v.max()) >= n_queries):
            raise UserError(f"attention pattern {name!r} returned node ids outside the sequence")
        starved = torch.bincount(v, minlength=n_queries) == 0
        if bool(starved.any()) and etype not in self.sample_terms:  # else checked with the sample's edges
            j = int(starved.nonzero()[0])
            raise UserError(
                f"attention pattern {name!r} ({etype[1]}) gives query {j} no key "
                f"(keys={n_keys}, queries={n_queries}); widen it or add +full / +global:1"
            )
        return unique_pairs(u, v, n_keys)

    def _build(self, n: int, m: int) -> HeteroGraph:
        """The heterograph of one sample with n source and m target tokens (m may be 0)."""
        if n < 1:
            raise ValueError("empty source sequence: every sample needs at least one source token")
        edges_of = {ENC: self._edges(ENC, n, n), DEC: self._edges(DEC, m, m), CROSS: self._edges(CROSS, n, m)}
        if self.has_spans:
            edges_of[SPAN] = tree.members(n)
        # A span node's position is its first token's (the Universal Transformer re-adds positions).
        spans_first = tree.first_tokens(n) if self.has_spans else torch.zeros(0, dtype=torch.int64)
        none = TypedEdges(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        typed = [r for r in self.edge_types if r not in self.sample_terms]  # the rest: typed with the sample's edges
        return HeteroGraph(
            {SRC: n + self.span_nodes(n), TGT: m},
            edges_of,
            {SRC: torch.cat([torch.arange(n), spans_first]), TGT: torch.arange(m)},
            {r: self._carried(r, n, m, *edges_of[r], none) for r in typed},
        )

    def _carried(self, etype, n: int, m: int, u: torch.Tensor, v: torch.Tensor, own: TypedEdges) -> dict:
        """What the edges (u, v) of ``etype`` carry in a sample of n source positions and m target
        nodes whose own edges (node ids) are ``own``: {"types": (E,)} and, where given, "features"."""
        derivation = self.edge_types[etype]
        source = etype[0] == SRC
        nodes = n + self.span_nodes(n) if source else m
        eos, cls = (n - 1, 0 if self.cls_node else None) if source else (None, None)
        sample = SampleGraph(u, v, own, nodes, eos, cls)
        carried = {"types": derivation.of_sample(sample)}
        features = derivation.features_of_sample(sample) if hasattr(derivation, "features_of_sample") else None
        return carried if features is None else carried | {"features": features}

    def _incoming(self, etype, n_keys: int, query: int) -> torch.Tensor:
        """Key positions of target ``query`` (DEC: n_keys = query + 1, CROSS: the source length).
        Patterns are prefix-stable, so this is exactly what the training graph holds."""
        u, v = self._edges(etype, n_keys, query + 1)
        return u[v == query]

    def batch(self, lengths: list[tuple[int, int]], edges: list[dict] | None = None) -> HeteroGraph:
        """The batched graph of samples with the given (n, m) node counts (n: source positions,
        m: target nodes), in order; ``edges[b]`` maps each etype of `sample_terms` to sample b's
        own edges (`with_sample_edges`)."""
        if not self.sample_terms:
            return heterograph.batch([self.graph(n, m) for n, m in lengths])
        if edges is None or len(edges) != len(lengths):
            raise ValueError(
                f"this pool's {' and '.join(r[1] for r in self.sample_terms)} attention takes each sample's "
                "own edges: give make_batch(..., edges=[one per sample])"
            )
        graphs = [self.with_sample_edges(n, m, e, b) for b, ((n, m), e) in enumerate(zip(lengths, edges))]
        for etype in self.edge_types:
            carried = [g.edge_data[etype] for g in graphs]
            widths = [data["features"].shape[1] if "features" in data else None for data in carried]
            b = next((b for b, width in enumerate(widths) if width != widths[0]), None)
            if b is not None:
                shown = ["none" if w is None else f"width {w}" for w in (widths[b], widths[0])]
                raise ValueError(
                    f"sample {b}, {etype[1]} attention: edge features of {shown[0]}, but sample 0's have "
                    f"{shown[1]}; give every sample features of one width"
                )
        return heterograph.batch(graphs)

    def with_sample_edges(self, n: int, m: int, edges: dict, sample: int = 0) -> HeteroGraph:
        """A copy of the length graph of a sample of n source positions and m target nodes, with its
        own edges joined to the etypes of `sample_terms` (``edges``: etype -> (u, v) in the
        sample's positions, see `sample_edges`, or a pattern ``(num_keys, num_queries) -> (u, v)``
        of this sample, called with its position counts). A ValueError names the sample (its
        place in ``edges``), the etype and what is wrong, in the sample's positions."""
        graph = self.graph(n, m)
        edges_of, edge_data = dict(graph.edges_of), dict(graph.edge_data)
        for etype in self.sample_terms:
            if etype not in edges:
                raise ValueError(f"sample {sample} has no edges for the {etype[1]} attention, which takes them")
            given = edges[etype]
            if callable(given):  # a pattern of this sample (`sample_edges.operands`), made for its positions
                given = given(*self.sample_positions(etype, n, m))
            try:
                typed = as_typed_edges(given)
                self.check_sample_edges(etype, n, m, typed.u, typed.v)
                if hasattr(self.edge_types.get(etype), "check"):  # given types: in range, features' width
                    self.edge_types[etype].check(typed)
            except ValueError as err:
                raise ValueError(f"sample {sample}, {etype[1]} attention: {err}") from None
            utype, _, vtype = etype
            own, (old_u, old_v) = typed.shifted(self._first(utype), self._first(vtype)), edges_of[etype]
            u, v = torch.cat([old_u, own.u]), torch.cat([old_v, own.v])
            edges_of[etype] = unique_pairs(u, v, graph.node_counts[utype])
            if etype in self.edge_types:
                edge_data[etype] = self._carried(etype, n, m, *edges_of[etype], own)
        return HeteroGraph(graph.node_counts, edges_of, graph.pos, edge_data)

    def sample_positions(self, etype, n: int, m: int) -> tuple[int, int]:
        """(keys, queries): the positions ``etype`` numbers a sample's own edges in, for a sample
        of n source positions and m target nodes. Source positions are its tokens and `</s>`: not
        the `<cls>` node, which graphformer places, nor a tree pattern's span nodes."""
        positions = {SRC: n - self.cls_node, TGT: m}
        return positions[etype[0]], positions[etype[2]]

    def _first(self, node_type: str) -> int:
        """The node id of a sample's position 0: a `<cls>` node comes before a source's tokens."""
        return int(self.cls_node) if node_type == SRC else 0

    def check_sample_edges(self, etype, n: int, m: int, u: torch.Tensor, v: torch.Tensor) -> None:
        """A ValueError, in the sample's positions (`sample_positions`), for an edge outside a
        sample of n source positions and m target nodes, a decoder edge from a later position, or
        a query that neither the etype's length part nor these edges give a key."""
        keys, queries = self.sample_positions(etype, n, m)
        sample_edges.check_positions(u, v, keys, queries, causal=etype == DEC)
        nodes = {SRC: n, TGT: m}
        utype, _, vtype = etype
        keyless = self.keyless(etype, nodes[utype], nodes[vtype]) - self._first(vtype)
        missing = keyless[~torch.isin(keyless, v)]
        if len(missing):
            query, term = int(missing[0]), self.sample_terms[etype]
            raise ValueError(
                f"query {query} has no key; give it an edge (a self-loop: {query}-{query}) or join a length "
                f"pattern, e.g. window:1+{term}"
            )

    def _keyless(self, etype, n_keys: int, n_queries: int) -> torch.Tensor:
        """The query node ids that ``etype``'s length part leaves without a key (all of them
        where the etype takes the sample's edges alone): a sample's own edges must give each one."""
        _, v = self._edges(etype, n_keys, n_queries)
        nodes = n_queries + (self.span_nodes(n_queries) if etype == ENC else 0)
        return (torch.bincount(v, minlength=nodes) == 0).nonzero()[:, 0]


def _edge_types(specs: Mapping, sample_terms: dict) -> dict:
    """{etype: derivation} of a pool's ``edge_types`` ({"enc": "role", ...}), each checked for
    its sub-layer (`sample_types.check_sublayer`)."""
    etypes = {etype[1]: etype for etype in (ENC, DEC, CROSS)}
    chosen = {}
    for name, spec in specs.items():
        etype = etypes.get(name, name)
        if etype not in etypes.values():
            raise ConfigError("edge_types", f"names the relation {name!r}; give enc, dec or cross")
        derivation = sample_types.parse_derivation(spec) if isinstance(spec, str) else spec
        sample_types.check_sublayer(derivation, str(spec), etype[1], sample_terms.get(etype))
        chosen[etype] = derivation
    return chosen


class GraphCache:
    """``cache(n, m)``: the graph ``build(n, m)``, kept for reuse among the most recently used ones
    while they hold at most ``max_edges`` edges together (the newest is kept whatever its size).

    A budget of edges, not of graphs: translation meets thousands of length pairs whose graphs are
    small, while a long-range task of varied lengths meets hundreds whose graphs are large (full
    attention over 2000 tokens has 4 million edges, 64 MB of index tensors), and a count alone let such a run grow by gigabytes. 2**24 edges are 256 MiB.
    """

    def __init__(self, build, max_edges: int):
        self.build, self.max_edges = build, max_edges
        self.graphs: OrderedDict = OrderedDict()
        self.edges = 0

    def __call__(self, n: int, m: int):
        key = (n, m)
        if key in self.graphs:
            self.graphs.move_to_end(key)
            return self.graphs[key]
        graph = self.graphs[key] = self.build(n, m)
        self.edges += graph.num_edges()
        while self.edges > self.max_edges and len(self.graphs) > 1:
            _, oldest = self.graphs.popitem(last=False)
            self.edges -= oldest.num_edges()
        return graph

    def __len__(self) -> int:
        return len(self.graphs)
