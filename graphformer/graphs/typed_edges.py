"""The pairs of an edges file, typed or not, and the forms a sample's edges take from Python.

A typed edges file extends the ``key-query`` pairs of `graphformer.graphs.sample_edges` with a type
after a colon, ``key-query:type``, the type a name or an id (0-based) from a *names file* beside
the edges, ``{sublayer}.types`` in the same folder (``enc.types`` for ``train.enc.edges``,
``valid.enc.edges`` and ``test.enc.edges``), one name a line::

    enc.types         train.enc.edges
    parent            0-0:self 0-1:parent 1-0:child 1-1:self
    child
    self

A file is typed or not as a whole: once a pair has a type, every pair of the file needs one. Old
files, with no colon anywhere, read as before. Names are letters, digits, ``-``, ``_`` and ``.``,
not digits alone (``3`` is an id).

From Python, a sample's edges may be ``(u, v, types)`` or ``(u, v, types, features)`` tensors
((E,) int, (E, F) float), a list of ``(key, query, type)`` triples, or a networkx graph whose edges
have a ``type`` (and ``features``) attribute.
"""

from __future__ import annotations

from pathlib import Path

import torch

from graphformer.data.text import read_lines
from graphformer.errors import UserError, did_you_mean
from graphformer.graphs.sample_types import TypedEdges

NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
WHOLE = (torch.int8, torch.int16, torch.int32, torch.int64)  # not bool, not float: never truncated
LAST_POSITION = torch.iinfo(torch.int64).max


def names_file(edges_path: str | Path, sublayer: str) -> Path:
    """Where the type names of the sub-layer ``sublayer``'s edges files in the folder of ``edges_path`` are."""
    return Path(edges_path).parent / f"{sublayer}.types"


def read_type_names(path: Path, declared: int | None = None) -> list[str]:
    """The names listed in ``path``, one a line. A UserError names the file (and the line) when it
    is missing, a name is empty, malformed, digits alone or listed twice, or the count differs from
    the ``declared`` one (the run's ``given:T``)."""
    if not path.is_file():
        raise UserError(
            f"{path} is missing: a typed edges file (key-query:type) reads its type names there, one a line"
        )
    names = read_lines(path)
    for i, name in enumerate(names):
        problem = (
            "is empty"
            if not name
            else "is not a name of letters, digits, -, _ and ."
            if not set(name) <= NAME_CHARACTERS
            else "is digits alone, which read as an id"
            if name.isdigit()
            else "is listed twice"
            if name in names[:i]
            else None
        )
        if problem:
            raise UserError(f"{path}: line {i + 1}: the type name {name!r} {problem}")
    if not names:
        raise UserError(f"{path} lists no type names; give one a line")
    if declared is not None and len(names) != declared:
        raise UserError(f"{path} lists {len(names)} types but the run declares given:{declared}; make them agree")
    return names


def is_typed(lines: list[str]) -> bool:
    """Whether an edges file's lines give types (a colon in any pair)."""
    return any(":" in line for line in lines)


def parse_pairs(line: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``"0-1 1-0"`` -> (u, v); a ValueError names the first piece that is not a ``key-query`` pair
    of ASCII digits (``isdigit`` alone takes ``²``), or one too large for any sample."""
    pairs = []
    for piece in line.split():
        key, dash, query = piece.partition("-")
        if not (dash and all(p.isascii() and p.isdigit() for p in (key, query))):
            raise ValueError(f"{piece!r} is not a key-query pair of token positions, such as 3-7")
        if max(int(key), int(query)) > LAST_POSITION:  # it would not fit a tensor of positions
            raise ValueError(f"{piece!r} names a position past any sample")
        pairs.append((int(key), int(query)))
    edges = torch.tensor(pairs, dtype=torch.int64).view(-1, 2)
    return edges[:, 0], edges[:, 1]


def parse_typed_pairs(line: str, names: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``"0-1:parent 1-0:1"`` -> (u, v, types), each type a name of ``names`` or an id below
    ``len(names)``; a ValueError names the first piece without a type or with a malformed, unknown
    or out-of-range one."""
    pairs, types = [], []
    for piece in line.split():
        pair, colon, kind = piece.partition(":")
        if not colon:
            raise ValueError(f"{piece!r} has no type, but this file gives its pairs one; write key-query:type")
        if not kind or not set(kind) <= NAME_CHARACTERS:
            raise ValueError(f"{piece!r} has a malformed type; write key-query:type, the type a name or an id")
        if kind.isdigit():
            if int(kind) >= len(names):
                raise ValueError(f"{piece!r}: type id {kind} is outside the declared types 0..{len(names) - 1}")
            types.append(int(kind))
        elif kind in names:
            types.append(names.index(kind))
        else:
            raise ValueError(f"{piece!r}: unknown type {kind!r}{did_you_mean(kind, names)}; known: {', '.join(names)}")
        pairs.append(pair)
    u, v = parse_pairs(" ".join(pairs))
    return u, v, torch.tensor(types, dtype=torch.int64)


def as_typed_edges(edges) -> TypedEdges:
    """A sample's edges from any form `make_batch` takes (see the module and
    `graphformer.graphs.sample_edges.as_edge_list`); a ValueError says what is wrong."""
    if hasattr(edges, "edges") and hasattr(edges, "is_directed"):
        return _of_networkx(edges)
    if isinstance(edges, tuple) and len(edges) in (2, 3, 4) and all(isinstance(e, torch.Tensor) for e in edges):
        return _checked(*edges)
    try:
        listed = [tuple(p) for p in edges]
        width = len(listed[0]) if listed else 2
        if width not in (2, 3) or any(len(p) != width for p in listed):
            raise ValueError
        rows = torch.tensor(listed).view(-1, width) if listed else torch.zeros(0, 2, dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            "sample edges are (u, v) tensors, a list of (key, query) pairs or (key, query, type) triples of "
            "whole numbers, or a networkx graph"
        ) from None
    return _checked(rows[:, 0], rows[:, 1], rows[:, 2] if width == 3 else None)


def _of_networkx(graph) -> TypedEdges:
    """A networkx graph's edges (both directions when it is undirected), with its ``type`` and
    ``features`` edge attributes where every edge has them."""
    listed = list(graph.edges(data=True))
    if not graph.is_directed():
        listed += [(b, a, data) for a, b, data in listed if a != b]
    pairs = torch.tensor([(a, b) for a, b, _ in listed], dtype=torch.int64).view(-1, 2)
    attributes = []
    for name in ("type", "features"):
        having = [name in data for _, _, data in listed]
        if any(having) and not all(having):
            a, b, _ = listed[having.index(False)]
            raise ValueError(f"edge ({a}, {b}) of the networkx graph has no {name!r}, which other edges have")
        attributes.append([data[name] for _, _, data in listed] if listed and all(having) else None)
    types, features = attributes
    return _checked(
        pairs[:, 0],
        pairs[:, 1],
        None if types is None else torch.tensor(types),
        None if features is None else torch.tensor(features, dtype=torch.get_default_dtype()),
    )


def _checked(u, v, types=None, features=None) -> TypedEdges:
    if u.dim() != 1 or u.shape != v.shape:
        raise ValueError("sample edges (u, v) must be two 1-D tensors of one length")
    if u.dtype not in WHOLE or v.dtype not in WHOLE:
        raise ValueError(f"sample edges are node positions, whole numbers; got {u.dtype} and {v.dtype}")
    if types is not None and (types.shape != u.shape or types.dtype not in WHOLE):
        raise ValueError(
            f"edge types must be {len(u)} whole numbers, one per edge; got {types.dtype} {list(types.shape)}"
        )
    if features is not None and (features.dim() != 2 or len(features) != len(u) or not features.is_floating_point()):
        raise ValueError(
            f"edge features must be a ({len(u)}, F) float tensor, one row per edge; got {list(features.shape)}"
        )
    return TypedEdges(u.long(), v.long(), None if types is None else types.long(), features)


__all__ = ["parse_pairs", "names_file", "read_type_names", "is_typed", "parse_typed_pairs", "as_typed_edges"]
