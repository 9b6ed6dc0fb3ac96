r"""Attention edges that come with each sample: a parse tree, a file of pairs, any graph.

A length pattern (`graphformer.graphs.patterns`) gives every sample of one length the same edges.
Here a sub-layer takes each sample's own edges too, named by a *sample term* in its spec:

    parse-tree     derived from the tokens of a bracketed prefix expression (ListOps, LRA's files;
                   `graphformer.graphs.expression_tree`), for the encoder
    operands       derived from a source ``A + B``: target position t reads position t of each
                   operand (addition; `operands`), for the cross-attention
    edges          given with the data: ``{split}.{sublayer}.edges`` beside ``{split}.src``
                   (`read_edges_file`), or ``make_batch(..., edges=...)`` from Python

A spec may join one sample term to length patterns, ``window:1+parse-tree``: the sub-layer's
edges are the union. Sample edges are never cached by length (two samples of one length differ).

Positions. Edges are (key, query) pairs of node positions within one sample, as a batch numbers
them: a source of n tokens has nodes 0..n-1 for its tokens and n for its `</s>`; a decoder input
has node 0 for `<s>` and node t for target token t (1-based), so the causal rule key <= query
holds on these numbers. A classifier's `<cls>` node is not counted, here or in any message: the
pool shifts the source positions past it (`GraphPool.sample_positions`).

The edges file: one line per line of ``{split}.src``, each a space-separated list of
``key-query`` pairs (an empty line: the sample has no edges of its own), for instance

    0-0 1-0 0-1 1-1 2-2

for the encoder's ``{split}.enc.edges``; ``{split}.dec.edges`` pairs decoder positions and
``{split}.cross.edges`` pairs a source position (key) with a decoder position (query). The file is
read as the data is (`graphformer.data.text.read_lines`: UTF-8, a byte-order mark dropped), and
checked whole when it is read, before a run writes anything: a position outside the sample, a
decoder edge from a later position, or a query that neither the sub-layer's length pattern nor the
line gives a key is refused with the file and the line (`GraphPool.check_sample_edges`). A pair
may carry a type, ``key-query:type``, named in a names file beside it (`graphformer.graphs.typed_edges`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from graphformer.catalog import SAMPLE_TERMS
from graphformer.data.corpus import Split
from graphformer.data.text import read_lines
from graphformer.errors import UserError
from graphformer.graphs.edges import EdgeList
from graphformer.graphs.expression_tree import parse_tree
from graphformer.graphs.typed_edges import (
    as_typed_edges,
    is_typed,
    names_file,
    parse_pairs,
    parse_typed_pairs,
    read_type_names,
)

# The sample terms' names, the entries of graphformer.catalog.SAMPLE_TERMS (live: a plugin's are in them).
SAMPLE_TERM_NAMES = SAMPLE_TERMS.names()
PARSE_TREE, OPERANDS = "parse-tree", "operands"  # the package's own
# The sub-layer each structure derived from the source serves: "enc", "dec" or "cross".
DERIVED_FOR = SAMPLE_TERMS.detail("serves")


def is_given(term: str) -> bool:
    """Whether the sample term ``term`` is read beside the data (``edges``), not derived from the tokens."""
    return SAMPLE_TERMS.entry(term).can("given")


def split_spec(spec: str) -> tuple[str | None, str | None]:
    """``"window:1+parse-tree"`` -> ``("window:1", "parse-tree")``: the length terms (None when
    there are none) and the sample term (None when there is none)."""
    terms = spec.replace(" ", "").split("+")
    sample = [t for t in terms if t in SAMPLE_TERM_NAMES]
    if len(sample) > 1:
        raise UserError(f"attention pattern {spec!r} joins {' and '.join(sample)}: give one sample term at most")
    length = "+".join(t for t in terms if t not in SAMPLE_TERM_NAMES)
    return (length or None), (sample[0] if sample else None)


def operands(words: Sequence[str]) -> Callable[[int, int], EdgeList]:
    """The cross-attention of a sum ``A + B`` written least significant digit first, as a
    pattern of this sample: target position t reads position t of each operand (where the
    operand has one) and the ``+``, which every position reads, so none is left without keys::

        source  9 1 + 3 5 7        target  <s> 2 7 7          (19 + 753 = 772)
                0 1 2 3 4 5        node     0  1 2 3
        node 0 reads 0, 3 and the + (2); node 1 reads 1, 4, 2; node 2 reads 5, 2; node 3 reads 2

    Decoder node t predicts digit t of the sum, a_t + b_t plus the carry out of position t - 1,
    which its input (digit t - 1) and its predecessor's operands give. Query t's keys do not
    depend on later queries, so a decoder makes them a token at a time, as training saw them.
    A ValueError says why the words are not two operands joined by one ``+``.
    """
    plus = [i for i, word in enumerate(words) if word == "+"]
    if len(plus) != 1:
        raise ValueError(f"it holds {len(plus)} '+' tokens, not one")
    (at,) = plus
    if at == 0 or at == len(words) - 1:
        raise ValueError(f"an operand is empty (the '+' is token {at} of {len(words)})")
    lengths = (at, len(words) - at - 1)

    def pattern(num_keys: int, num_queries: int) -> EdgeList:
        queries = torch.arange(num_queries)
        a, b = queries[queries < lengths[0]], queries[queries < lengths[1]]
        u = torch.cat([a, at + 1 + b, torch.full((num_queries,), at)])
        return u, torch.cat([a, b, queries])

    return pattern


def derive(term: str, words: Sequence[str], sample: int | str):
    """The edges a named structure derives from one sample's tokens: (u, v) for ``parse-tree``,
    a pattern of the sample (``(num_keys, num_queries) -> (u, v)``, made for each target length)
    for ``operands``. A UserError names the sample: its number, or words such as ``"input line 3"``
    or ``"data/train.src: line 3"``, and the token where it stops parsing."""
    if term not in DERIVED_FOR:
        raise ValueError(f"{term!r} names no structure derived from tokens (those are {', '.join(DERIVED_FOR)})")
    where = f"sample {sample}" if isinstance(sample, int) else sample
    try:
        return SAMPLE_TERMS[term](words)
    except ValueError as err:  # the entry's "fails" (required of a derived term) says what the tokens are not
        raise UserError(f"{where} {SAMPLE_TERMS.entry(term).details['fails']} ({term}): {err}") from None


def edges_file(data_dir: str | Path, split: str, sublayer: str) -> Path:
    """Where the given edges of the sub-layer ``sublayer`` ('enc', 'dec' or 'cross') for ``split`` are read."""
    return Path(data_dir) / f"{split}.{sublayer}.edges"


def read_edges_file(path: Path, pool, etype, lengths: Sequence[tuple[int, int] | None]) -> list:
    """Each line's edges of ``etype``, in the sample's positions: (u, v), or (u, v, types) for a
    typed file (`graphformer.graphs.typed_edges`), checked against the sample of the same line
    (``lengths[i]``: its source positions and target nodes as `GraphPool.batch` takes them; None:
    a line no batch will hold, whose pairs are only parsed). A UserError names the file
    (`pool`'s `GraphPool.check_sample_edges` says what a line may hold) and the line of a line
    count unlike the data's, a malformed pair or type, an unknown type or one outside the declared
    types, a position out of range, a decoder edge from a later position or a query left without a
    key; and a file without types where the pool's ``etype`` takes given types."""
    if not path.is_file():
        raise UserError(f"{path} is missing: the attention pattern 'edges' reads each sample's edges from it")
    lines = read_lines(path)
    if len(lines) != len(lengths):
        raise UserError(
            f"{path} has {len(lines)} lines but its data has {len(lengths)} samples; give one line of edges per sample"
        )
    derivation = pool.edge_types.get(etype)
    declared = getattr(derivation, "declared", None)  # given:T types its edges
    if getattr(derivation, "features", None) is not None:
        raise UserError(
            f"{path}: edges files carry no features, but the run's {etype[1]} edge types are "
            f"given:{declared},{derivation.features}; drop the features or give the edges from Python"
        )
    names = read_type_names(names_file(path, etype[1]), declared) if is_typed(lines) else None
    if names is None and declared is not None:
        raise UserError(
            f"{path} gives no types, but the run's {etype[1]} edge types are given:{declared}; write key-query:type"
        )
    edges = []
    for i, (line, sample) in enumerate(zip(lines, lengths)):
        try:
            edges.append(parse_pairs(line) if names is None else parse_typed_pairs(line, names))
            if sample is not None:
                pool.check_sample_edges(etype, *sample, *edges[-1][:2])
        except ValueError as err:
            raise UserError(f"{line_of(path, i)}: {err}") from None
    return edges


def line_of(path: str | Path, i: int) -> str:
    """How an error names sample ``i`` (counted from 0) of a file of one sample a line: ``PATH: line i+1``."""
    return f"{path}: line {i + 1}"


def check_positions(u: torch.Tensor, v: torch.Tensor, keys: int, queries: int, causal: bool) -> None:
    """A ValueError for a position outside the sample (``keys`` key and ``queries`` query nodes)
    or, for a decoder's self-attention, an edge from a later position."""
    bad = (u < 0) | (u >= keys) | (v < 0) | (v >= queries)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(
            f"edge {int(u[i])}-{int(v[i])} is outside the sample ({keys} key and {queries} query positions)"
        )
    later = u > v
    if causal and bool(later.any()):
        i = int(later.nonzero()[0])
        raise ValueError(f"edge {int(u[i])}-{int(v[i])} lets a decoder position read a later one; keep key <= query")


class SplitEdges(Sequence):
    """Each sample's own edges of a split, ``edges[i]``: {etype: (u, v)} for the etypes
    that take them. Derived structures are parsed once here, so a sample that does not parse
    fails before training, and derived again on each use (a parse costs far less than a step, and
    keeping a long split's trees would cost memory); edges files are read once and kept."""

    def __init__(
        self,
        words: Sequence[Sequence[str]],
        derived: dict,
        given: dict,
        checked: bool = False,
        lines: bool = False,
        source: str | Path | None = None,
    ):
        """A sample that does not parse is named by its line: ``input line N`` for ``lines`` to
        translate, ``{source}: line N`` for a split read from the file ``source``, else ``sample i``."""
        self.words, self.derived, self.given = words, derived, given
        self.lines, self.source = lines, source
        for term in () if checked else derived.values():
            for i, sample in enumerate(words):
                derive(term, sample, self.name(i))

    def name(self, i: int) -> str | int:
        """How an error names sample ``i``: its 1-based line where it has one, else its number."""
        if self.lines:
            return f"input line {i + 1}"
        return i if self.source is None else f"{self.source}: line {i + 1}"

    def __len__(self) -> int:
        return len(self.words)

    def __getitem__(self, i):
        if isinstance(i, slice):  # the first samples of a split (train_limit)
            given = {etype: listed[i] for etype, listed in self.given.items()}
            return SplitEdges(self.words[i], self.derived, given, checked=True, lines=self.lines, source=self.source)
        edges = {etype: derive(term, self.words[i], self.name(i)) for etype, term in self.derived.items()}
        return edges | {etype: listed[i] for etype, listed in self.given.items()}


def attach(split: Split, pool, data_dir: str | Path, name: str) -> Split:
    """``split`` with the sample edges its ``pool``'s patterns take (`split_edges`), as read
    from ``data_dir`` for the split ``name``."""
    split.edges = split_edges(pool, data_dir, name, split.src_words, split.tgt_words)
    return split


def split_edges(
    pool, data_dir: str | Path, split: str, src_words: Sequence[Sequence[str]], tgt_words: Sequence
) -> SplitEdges | None:
    """The sample edges of ``split`` for the ``pool``'s ``sample_terms`` ({etype: term}), or None
    when it has none: structures derived from the source words (`derive`), ``edges`` read from
    ``{split}.{sublayer}.edges`` and checked against each sample (`read_edges_file`)."""
    terms = pool.sample_terms
    if not terms:
        return None
    lengths = [(pool.source_positions(len(s)), pool.target_nodes(len(t))) for s, t in zip(src_words, tgt_words)]
    derived, given = {}, {}
    for etype, term in terms.items():
        if is_given(term):
            path = edges_file(data_dir, split, etype[1])
            given[etype] = read_edges_file(path, pool, etype, lengths)
        else:
            derived[etype] = term
    return SplitEdges(src_words, derived, given, source=Path(data_dir) / f"{split}.src")


def edges_of_lines(pool, words: Sequence[Sequence[str]], path: str | Path | None) -> SplitEdges | None:
    """The sample edges for lines to translate with the ``pool``'s ``sample_terms``: the
    structures derived from each line's words, and the encoder's edges read from ``path`` (an
    edges file, one line per line; an empty input line is not translated, and its edges are
    only parsed). A UserError says which line does not parse or leaves a query without a key,
    or that the edges file is missing. A decoder's or cross edges given with the data are left
    out: decoding refuses them."""
    terms = pool.sample_terms
    derived = {etype: term for etype, term in terms.items() if not is_given(term)}
    given_enc = next((r for r, term in terms.items() if r[1] == "enc" and is_given(term)), None)
    if not (derived or given_enc):
        return None
    given = {}
    if given_enc is not None:
        if path is None:
            raise UserError(
                f"the run's encoder attention reads each sample's edges ({terms[given_enc]!r}): give --edges FILE, one line of "
                "key-query pairs per input line"
            )
        lengths = [(pool.source_positions(len(w)), pool.target_nodes(0)) if w else None for w in words]
        given[given_enc] = read_edges_file(Path(path), pool, given_enc, lengths)
    return SplitEdges(words, derived, given, lines=True)


def as_edge_list(edges) -> EdgeList:
    """A sample's edges as (u, v) from a pair of 1-D integer tensors, a list of (key, query) pairs
    or a networkx graph on node positions (an undirected one gives both directions); the typed
    forms of `graphformer.graphs.typed_edges` are read too, their types dropped."""
    typed = as_typed_edges(edges)
    return typed.u, typed.v


__all__ = [
    "SAMPLE_TERM_NAMES",
    "is_given",
    "SplitEdges",
    "split_spec",
    "parse_tree",
    "operands",
    "derive",
    "parse_pairs",
    "read_edges_file",
    "line_of",
    "split_edges",
    "attach",
    "edges_of_lines",
    "as_edge_list",
]
