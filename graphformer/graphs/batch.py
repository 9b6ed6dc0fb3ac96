"""Mini-batches as one batched heterograph plus flat per-node tensors.

There is no padding: a batch of B samples with lengths (n_b, m_b) has sum(n_b) source nodes
and sum(m_b) target nodes, numbered sample by sample, and every per-node tensor below is indexed
by those node ids. (A tree encoder pattern adds span nodes after each sample's source tokens.)

A source sentence x_1..x_n gets n + 1 nodes, x_1 ... x_n `</s>`: the end marker gives the
decoder a key to find where the source stops (without it, "the position after the last
token" has no node to attend to, and copying learns the length of its output poorly).
Teacher forcing for a target sentence y_1..y_k (without specials) uses m = k + 1 nodes:

    decoder input   <s>  y_1 ... y_k
    gold output     y_1  ...  y_k </s>

A classifier's batch (a pool with ``targets=False``) has no target nodes: its gold holds one
label per sample, the single token of each target, and with ``pool.cls_node`` every source starts
with a global `<cls>` node, which carries the `<s>` token (as in RoBERTa; the source side has no
other use for it):

    source nodes    <cls>  x_1 ... x_n  </s>        gold   label

The graph (a `HeteroGraph` of index tensors) is built and batched on the CPU and stays there;
`GraphBatch.to` moves the per-node tensors, and each `GraphBatch.relation` moves its edges to
that device once per batch (this is all the attention backends need). `GraphBatch.dgl_graph`
is the same batch as a DGL heterograph, where DGL is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import torch

from graphformer.graphs.heterograph import HeteroGraph
from graphformer.graphs.pool import CROSS, DEC, ENC, SPAN, SRC, TGT, GraphPool
from graphformer.graphs.relation import Relation
from graphformer.vocab import EOS, PAD, SOS


@dataclass
class GraphBatch:
    """What a model needs to run one mini-batch.

    Attributes:
        graph: the batched `HeteroGraph` (see `graphformer.graphs.pool`), on the CPU.
        src_tokens, src_pos: (N_src,) token id and position of each source node.
        tgt_tokens, tgt_pos: (N_tgt,) decoder input token and position of each target node.
        gold: what the model's log-probabilities are scored against: (N_tgt,) the token each target
            node must predict, or for a classifier's batch (B,) each sample's label; ``None`` for
            inference batches.
        src_lengths, tgt_lengths: (B,) token nodes per sample (with `</s>`, `<cls>`, `<s>`).
        src_nodes: (B,) source nodes per sample: its tokens, then the span nodes a tree encoder
            pattern adds (equal to ``src_lengths`` for every other pattern).
        targets, cls_node: those of the pool that made the batch (a classifier's pool has no target
            nodes, and may put a `<cls>` node first): a model checks them against its own.
    """

    graph: HeteroGraph
    src_tokens: torch.Tensor
    src_pos: torch.Tensor
    tgt_tokens: torch.Tensor
    tgt_pos: torch.Tensor
    gold: torch.Tensor | None
    src_lengths: torch.Tensor
    tgt_lengths: torch.Tensor
    src_nodes: torch.Tensor
    targets: bool = True
    cls_node: bool = False
    _relations: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.src_lengths)

    @property
    def num_tgt_tokens(self) -> int:
        return len(self.tgt_tokens)

    @property
    def device(self) -> torch.device:
        """Where the per-node tensors, and the relations' index tensors, are."""
        return self.src_tokens.device

    def relation(self, etype: tuple[str, str, str]) -> Relation:
        """The `Relation` of ``ENC``, ``DEC``, ``CROSS`` or ``SPAN`` on the batch's device,
        with each sample's key and query counts, each node's position and the edge types (and
        features) its pool computed (read once, then cached)."""
        if etype not in self._relations:
            keys, queries = {
                ENC: (self.src_nodes, self.src_nodes),
                DEC: (self.tgt_lengths, self.tgt_lengths),
                CROSS: (self.src_nodes, self.tgt_lengths),
                SPAN: (self.src_nodes, self.src_nodes),
            }[etype]
            key_positions, query_positions = (self.tgt_pos if t == TGT else self.src_pos for t in (etype[0], etype[2]))
            (u, v), (utype, _, vtype) = self.graph.edges(etype), etype
            carried = self.graph.edge_data.get(etype, {})  # a pool's edge_types= (graphs.sample_types)
            self._relations[etype] = Relation.of_edges(
                u,
                v,
                self.graph.num_nodes(utype),
                self.graph.num_nodes(vtype),
                keys,
                queries,
                device=self.device,
                verified=True,
                key_positions=key_positions,
                query_positions=query_positions,
                edge_types=carried.get("types"),
                edge_features=carried.get("features"),
            )  # the pool checked its patterns
        return self._relations[etype]

    @property
    def has_spans(self) -> bool:
        return SPAN in self.graph.canonical_etypes

    def dgl_graph(self):
        """The batch's graph as a DGL heterograph (CPU, positions in ``ndata['pos']``); needs DGL."""
        return self.graph.to_dgl()

    @cached_property
    def src_offsets(self) -> torch.Tensor:
        """(B,) id of each sample's first source node."""
        return torch.cumsum(self.src_nodes, 0) - self.src_nodes

    def to(self, device: torch.device | str) -> GraphBatch:
        """The batch with its tensors on ``device``; the graph stays on the CPU."""
        moved = {
            name: getattr(self, name).to(device)
            for name in ("src_tokens", "src_pos", "tgt_tokens", "tgt_pos", "src_lengths", "tgt_lengths", "src_nodes")
        }
        gold = None if self.gold is None else self.gold.to(device)
        return replace(self, gold=gold, _relations={}, **moved)


def make_batch(
    pool: GraphPool,
    src: Sequence[Sequence[int]],
    tgt: Sequence[Sequence[int]] | None = None,
    edges: Sequence | Callable | None = None,
) -> GraphBatch:
    """Batch source sequences and (for training) target sequences of token ids.

    Sequences are given without specials; `</s>` ends every source, `<s>` starts every decoder input
    and `</s>` ends every gold output. Without targets the batch has no target nodes and serves as
    the start of decoding. With a classifier's pool (``pool.targets`` false) each target is one
    label token, the batch has no target nodes either, and ``gold`` holds the (B,) labels.

    ``edges`` gives each sample's own edges where the pool's patterns take them (``parse-tree``,
    ``edges``: `graphformer.graphs.sample_edges`): one entry per sample, each a mapping from
    sub-layer name ('enc', 'dec', 'cross') to (u, v) tensors, (key, query) pairs or a networkx
    graph, or those edges alone where one sub-layer takes them; or a function of a sample's
    source ids that returns such an entry. Where the pool's ``edge_types`` say a sub-layer's types
    are given, its edges carry them: (u, v, types) or (u, v, types, features) tensors,
    (key, query, type) triples, or networkx edges with ``type`` (and ``features``) attributes
    (`graphformer.graphs.typed_edges`).
    """
    _check_samples(pool, src, tgt)
    src_lengths = torch.tensor([pool.source_positions(len(s)) for s in src])
    spans = [pool.span_nodes(n) for n in src_lengths.tolist()]
    cls = (SOS,) * pool.cls_node
    # Span nodes (tree patterns) carry <pad>: their inputs are pooled from their tokens instead.
    src_tokens = _ids([t for s, k in zip(src, spans) for t in (*cls, *s, EOS, *[PAD] * k)], "source")
    if tgt is None or not pool.targets:
        tgt_lengths = torch.zeros(len(src), dtype=torch.int64)
        tgt_tokens = torch.zeros(0, dtype=torch.int64)
        gold = None if tgt is None else labels(tgt)
    else:
        tgt_lengths = torch.tensor([len(t) + 1 for t in tgt])
        tgt_tokens = _ids([t for y in tgt for t in (SOS, *y)], "target")
        gold = _ids([t for y in tgt for t in (*y, EOS)], "target")

    graph = pool.batch(list(zip(src_lengths.tolist(), tgt_lengths.tolist())), per_sample_edges(pool, src, edges))
    return GraphBatch(
        graph=graph,
        src_tokens=src_tokens,
        src_pos=graph.pos[SRC],
        tgt_tokens=tgt_tokens,
        tgt_pos=graph.pos[TGT],
        gold=gold,
        src_lengths=src_lengths,
        tgt_lengths=tgt_lengths,
        src_nodes=torch.tensor([pool.source_nodes(len(s)) for s in src], dtype=torch.int64),
        targets=pool.targets,
        cls_node=pool.cls_node,
    )


def _check_samples(pool: GraphPool, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None) -> None:
    if len(src) == 0:
        raise ValueError("empty batch: give at least one sample")
    for i, s in enumerate(src):
        if isinstance(s, (str, bytes)) or not hasattr(s, "__len__"):
            raise ValueError(
                f"sample {i} is a {type(s).__name__}, not a sequence of token ids; encode it first (Vocab.encode)"
            )
        if len(s) == 0:
            raise ValueError(f"sample {i} has an empty source sequence; drop it or add a token")
    if tgt is not None and len(tgt) != len(src):
        raise ValueError(f"{len(src)} source sequences but {len(tgt)} target sequences")
    _check_words(src, "source")
    if tgt is not None and pool.targets:
        _check_words(tgt, "target")


def per_sample_edges(pool: GraphPool, src: Sequence[Sequence[int]], edges) -> list[dict] | None:
    """``edges`` as one {etype: edges} per sample (see `make_batch`), or None where none are given
    (or the pool takes none)."""
    if not pool.sample_terms:
        if edges is not None:
            raise ValueError(
                "edges were given, but no attention pattern of this pool takes them; add a sample term "
                "to one, e.g. GraphPool(enc='window:1+edges')"
            )
        return None
    if edges is None:
        return None  # the pool says what is missing
    per_sample = [edges(s) for s in src] if callable(edges) else list(edges)
    if len(per_sample) != len(src):
        raise ValueError(f"{len(src)} samples but {len(per_sample)} entries of edges; give one per sample")
    etypes = {etype[1]: etype for etype in (ENC, DEC, CROSS)}
    only = next(iter(pool.sample_terms)) if len(pool.sample_terms) == 1 else None
    entries = []
    for i, entry in enumerate(per_sample):
        if isinstance(entry, Mapping):
            unknown = [name for name in entry if etypes.get(name, name) not in pool.sample_terms]
            if unknown:
                raise ValueError(f"sample {i}: edges for {unknown[0]!r}, which takes none here")
            entries.append({etypes.get(name, name): e for name, e in entry.items()})
        elif only is None:
            raise ValueError(f"sample {i}: several sub-layers take edges; map each name ('enc', ...) to its edges")
        else:
            entries.append({only: entry})
    return entries


def _ids(values: list, side: str) -> torch.Tensor:
    """(N,) int64 token ids; anything but whole numbers (floats, bools) is refused, not truncated."""
    ids = torch.tensor(values) if len(values) else torch.zeros(0, dtype=torch.int64)
    if ids.dtype != torch.int64:
        raise ValueError(f"{side} token ids must be integers, got {ids.dtype} values; encode tokens with Vocab.encode")
    return ids


def _check_words(seqs: Sequence[Sequence[int]], side: str) -> None:
    """Sequences hold words only: `<pad>`, `<s>` and `</s>` are the batch's to place (a row of a
    padded tensor would make its padding attended nodes)."""
    words = _ids([t for s in seqs for t in s], side)
    markers = words <= EOS  # PAD, SOS, EOS are the ids below UNK
    if bool(markers.any()):
        at = int(markers.nonzero()[0])
        sample = int(torch.searchsorted(torch.cumsum(torch.tensor([len(s) for s in seqs]), 0), at, right=True))
        raise ValueError(
            f"{side} sample {sample} holds id {int(words[at])} (<pad>, <s> or </s>): give sequences "
            "without specials or padding (make_batch adds </s> and <s>), e.g. row[row > 2] of a padded "
            "tensor"
        )


def labels(tgt: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B,) the label of each sample of a classifier: its target's one token."""
    for i, t in enumerate(tgt):
        if len(t) != 1:
            raise ValueError(f"sample {i} has a target of {len(t)} tokens; a classifier's target is one label token")
    return _ids([t[0] for t in tgt], "label")


__all__ = ["GraphBatch", "make_batch", "ENC", "DEC", "CROSS", "SPAN", "SRC", "TGT"]
