r"""What the model does with each attention sub-layer's edges, as the command line writes it: ``--enc-edges SPEC``.

A SPEC is ``none`` or terms joined by ``+``, each ``USE=TYPES``:

    USE     an entry of `graphformer.catalog.EDGE_USES`: what attention does with an edge's type
            (bias: a learned scalar per type and head; alibi: a fixed slope per head times the
            distance; shaw: learned key and value vectors per type; features: learned maps of
            each edge's features to its key and value)
    TYPES   an entry of `graphformer.catalog.EDGE_TYPES` with its integer arguments after a colon,
            comma separated, as patterns take theirs: relative:16, t5:32,128, distance

    bias=t5:32,128          bias=relative:16+shaw=relative:4          alibi   (= alibi=distance)

A use whose entry names its ``types`` (alibi: distance) may leave ``=TYPES`` out. The terms of one
sub-layer add up: their score biases are summed, their value vectors too.

This module imports no torch until a spec is read (`parse_edges` builds each term's derivation,
whose own checks refuse arguments that make no sense, e.g. T5 buckets too few to split): the
command line reads `edges_help` for ``--help``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from graphformer.catalog import EDGE_TYPES, EDGE_USES
from graphformer.errors import ConfigError, UserError, did_you_mean

NONE = "none"
# A causal decoder's keys never come after its query: T5 gives all its buckets to one side there.
ONE_SIDED = ("dec",)


@dataclass(frozen=True)
class EdgeTerm:
    """One ``USE=TYPES`` term of a sub-layer's spec: ``use`` names an EDGE_USES entry, ``types`` an
    EDGE_TYPES entry taking the integers ``arguments``; ``sublayer`` is 'enc', 'dec' or 'cross'."""

    use: str
    types: str
    arguments: tuple[int, ...]
    sublayer: str

    @property
    def per_sample(self) -> bool:
        """Whether the types come with each sample's edges (a parse tree's roles) rather than from positions."""
        return EDGE_TYPES.entry(self.types).can("per-sample")

    @property
    def types_spec(self) -> str:
        """The TYPES part as written: ``t5:32,128``."""
        return self.types + (":" + ",".join(map(str, self.arguments)) if self.arguments else "")

    def derivation(self):
        """The `graphformer.graphs.edge_types` derivation of each edge's type id (imports torch)."""
        build = EDGE_TYPES[self.types]
        if self.sublayer in ONE_SIDED and "bidirectional" in inspect.signature(build).parameters:
            return build(*self.arguments, bidirectional=False)  # its checks are the one-sided ones
        return build(*self.arguments)


def field_of(sublayer: str) -> str:
    """The config field of a sub-layer's spec: 'enc' -> 'enc_edges'."""
    return f"{sublayer}_edges"


def parse_edges(spec: str, sublayer: str) -> tuple[EdgeTerm, ...]:
    """The terms of ``spec`` for ``sublayer`` ('enc', 'dec', 'cross'); () for ``none``. A
    `graphformer.errors.ConfigError` on the sub-layer's field names what is wrong and how to write it."""
    field = field_of(sublayer)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(field, "is empty; give none or USE=TYPES terms joined by +, e.g. bias=relative:16")
    if spec.strip() == NONE:
        return ()
    terms = spec.replace(" ", "").split("+")
    if any(not t for t in terms):
        raise ConfigError(field, f"{spec!r} has an empty term around '+'; e.g. bias=relative:16+alibi")
    parsed = tuple(_parse_term(t, sublayer) for t in terms)
    kinds = {t.types_spec for t in parsed if t.per_sample}
    if len(kinds) > 1:
        raise ConfigError(field, f"{spec!r} reads {' and '.join(sorted(kinds))} from each sample; one kind at a time")
    return parsed


def _parse_term(term: str, sublayer: str) -> EdgeTerm:
    field = field_of(sublayer)
    use, _, types = term.partition("=")
    if use not in EDGE_USES:
        raise ConfigError(
            field, f"term {term!r}: unknown use {use!r}{did_you_mean(use, EDGE_USES)}; known: {', '.join(EDGE_USES)}"
        )
    entry = EDGE_USES.entry(use)
    types = types or entry.details.get("types", "")
    if not types:
        raise ConfigError(field, f"term {term!r}: {use} needs the edge types it reads, e.g. {use}=relative:16")
    name, _, args = types.partition(":")
    if name not in EDGE_TYPES:
        hint = did_you_mean(name, EDGE_TYPES)
        raise ConfigError(field, f"term {term!r}: unknown edge type {name!r}{hint}; known: {', '.join(EDGE_TYPES)}")
    parsed = EdgeTerm(use, name, _arguments(term, name, args, field), sublayer)
    _check_fits(parsed, term, field)
    _check_builds(parsed, term, field)
    return parsed


def _arguments(term: str, name: str, args: str, field: str) -> tuple[int, ...]:
    """The integers after ``name:``, as many as its entry's ``arguments`` allow, each positive."""
    from graphformer.graphs.patterns import arity  # torch: only once a config is made

    written = EDGE_TYPES.entry(name).details.get("arguments", "")
    allowed = arity(written)
    try:
        values = tuple(int(a) for a in args.split(",")) if args else ()
    except ValueError:
        raise ConfigError(field, f"term {term!r}: the arguments of {name} must be integers") from None
    if len(values) not in allowed:
        example = f"{name}:{written}" if written else name
        raise ConfigError(
            field, f"term {term!r}: {name} takes {' or '.join(map(str, allowed))} integer argument(s): {example}"
        )
    if any(v < 1 for v in values):
        raise ConfigError(field, f"term {term!r}: the arguments of {name} must be positive integers")
    return values


def _check_fits(term: EdgeTerm, written: str, field: str) -> None:
    """A use reads its types in one way: a table needs finitely many ids, a distance use distance only."""
    use = EDGE_USES.entry(term.use)
    if use.can("distance") and term.types != "distance":
        raise ConfigError(field, f"term {written!r}: {term.use} multiplies the distance; write {term.use}")
    if use.can("table") and term.types == "distance":
        raise ConfigError(
            field,
            f"term {written!r}: distance has no bound, and {term.use} learns a row per type; "
            "clip it (relative:16, t5:32,128) or use alibi",
        )


def _check_builds(term: EdgeTerm, written: str, field: str) -> None:
    """The derivation's own checks of its arguments (T5's buckets and distance, a hops clip),
    made as the spec is read, so that a bad one is refused before a model or a run exists."""
    try:
        made = term.derivation()
    except (UserError, ValueError) as err:
        raise ConfigError(field, f"term {written!r}: {err}") from None
    if EDGE_USES.entry(term.use).can("features") and not getattr(made, "features", None):
        raise ConfigError(
            field, f"term {written!r}: {term.use} maps each edge's features; give types with F of them, e.g. given:3,4"
        )


def per_sample_types(terms_of: dict[str, tuple[EdgeTerm, ...]]) -> dict[str, str]:
    """``{sublayer: TYPES}`` of the sub-layers whose types come with each sample (for the graph pool)."""
    return {r: t.types_spec for r, terms in terms_of.items() for t in terms if t.per_sample}


def backend_needs(terms: tuple[EdgeTerm, ...]) -> set[str]:
    """The `graphformer.catalog.BACKENDS` capabilities that attention with these terms needs."""
    return {"edge-type-bias" if t.per_sample else "position-bias" for t in terms}


def edges_help(sublayer: str) -> str:
    """``--{sublayer}-edges``'s help, from the registries (a plugin's uses and types are in it):
    the encoder's lists them, the others refer to it."""
    where = {"enc": "encoder self-attention", "dec": "decoder self-attention", "cross": "cross-attention"}[sublayer]
    if sublayer != "enc":
        return f"what {where} does with each edge's type (SPEC as --enc-edges), e.g. bias=t5:32,128"
    uses = "; ".join(f"{e.name}: {e.summary}" for e in EDGE_USES.entries())
    types = ", ".join(
        f"{e.name}:{e.details['arguments']}" if e.details.get("arguments") else e.name for e in EDGE_TYPES.entries()
    )
    return (
        f"what {where} does with each edge's type: none, or USE=TYPES terms joined by +, e.g. "
        f"bias=t5:32,128, alibi, shaw=relative:8. Uses: {uses}. Types: {types}"
    )


__all__ = ["EdgeTerm", "parse_edges", "per_sample_types", "backend_needs", "edges_help", "field_of"]
