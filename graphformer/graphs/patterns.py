r"""Attention patterns: which keys each query may attend to.

A pattern is a function ``(num_keys, num_queries) -> (u, v)`` returning two int64 tensors of
equal length: edge ``u[k] -> v[k]`` lets query ``v[k]`` attend to key ``u[k]``. For
self-attention ``num_keys == num_queries``; for cross-attention keys are source positions and
queries target positions. Every pattern below is a set of (key i, query j) pairs:

    full                every pair                                  n_k * n_q edges
    causal              i <= j                                      n(n+1)/2
    window:w            |i - c(j)| <= w
    mirror:w            |i - (n_k - 1 - c(j))| <= w   (the window reflected: query j near key
                        n_k - 1 - j, where a reversed copy finds its source)
    dilated:w,d         i - c(j) = k*d for |k| <= w   (Sparse Transformer's strided pattern)
    global:g            i < g or j < g   (the first g tokens see and are seen by all; Longformer)
    random:r[,seed]     r keys per query, drawn with a seeded RNG (BigBird)
    block:b             i // b == c(j) // b                         (block-local)
    tree:k              a binary-partition tree with span nodes (BP-Transformer, encoder only;
                        see graphformer.graphs.tree): O(k n log n) edges

c(j) is j itself, or the last key for a query past the end of a shorter key sequence
(cross-attention when the output is longer than the input), so no query is ever left without keys.
``causal-NAME`` keeps only the pairs with i <= j of NAME: decoder self-attention must be causal.
Patterns combine by union with ``+``: ``window:8+global:1``. `parse` turns such a string into
a pattern; `from_edges`, `from_networkx` and plain Python functions make patterns too.

Every pattern here is *prefix-stable*: the keys of query j do not depend on how many queries
come after it, so incremental decoding sees exactly the edges that training saw.
"""

from __future__ import annotations

import numbers
import random
from collections.abc import Callable, Iterable

import torch

from graphformer.catalog import PATTERNS, SAMPLE_TERMS
from graphformer.choices import PATTERN_NAMES
from graphformer.errors import UserError, did_you_mean
from graphformer.graphs import tree as tree_graph
from graphformer.graphs.edges import EdgeList, unique_pairs

Pattern = Callable[[int, int], EdgeList]


def _pairs(num_keys: int, num_queries: int) -> EdgeList:
    """Every (key, query) pair, query-major."""
    u = torch.arange(num_keys).repeat(num_queries)
    v = torch.arange(num_queries).repeat_interleave(num_keys)
    return u, v


def _where(num_keys: int, num_queries: int, keep) -> EdgeList:
    u, v = _pairs(num_keys, num_queries)
    mask = keep(u, v)
    return u[mask], v[mask]


def full(num_keys: int, num_queries: int) -> EdgeList:
    """Every query attends to every key."""
    return _pairs(num_keys, num_queries)


def causal(num_keys: int, num_queries: int) -> EdgeList:
    """Query j attends to keys 0..j: the decoder never sees a later target token."""
    return _where(num_keys, num_queries, lambda i, j: i <= j)


def _centres(nk: int, nq: int) -> torch.Tensor:
    """Where each query sits among the keys: its own position, or the last key for queries past
    the end (cross-attention to a shorter source), so that no query is left without keys."""
    return torch.arange(nq).clamp(max=max(nk - 1, 0))


def _offsets(nk: int, nq: int, offsets: torch.Tensor) -> EdgeList:
    """Keys centre + offset for each query, those inside the sequence: O(edges), not O(n^2)."""
    centre = _centres(nk, nq)
    u = (centre[:, None] + offsets[None, :]).reshape(-1)
    v = torch.arange(nq).repeat_interleave(len(offsets))
    keep = (u >= 0) & (u < nk)
    return u[keep], v[keep]


def window(w: int) -> Pattern:
    _positive("window", w)

    def pattern(nk: int, nq: int) -> EdgeList:
        reach = min(w, nk)  # a wider window reaches no further key: the same edges, for any w
        return _offsets(nk, nq, torch.arange(-reach, reach + 1))

    return _named(pattern, f"window:{w}")


def mirror(w: int) -> Pattern:
    _positive("mirror", w)
    forward = window(w)

    def pattern(nk: int, nq: int) -> EdgeList:
        u, v = forward(nk, nq)  # the offsets are symmetric, so reflecting the keys reflects the centre
        return nk - 1 - u, v

    def no_causal_form():
        raise UserError(
            f"attention pattern 'causal-mirror:{w}': a mirror is placed from the last key, which a "
            "decoder does not have until it ends; give mirror to --enc-attention or --cross-attention"
        )

    pattern.causal_form = no_causal_form
    return _named(pattern, f"mirror:{w}")


def dilated(w: int, d: int) -> Pattern:
    _positive("dilated", w)
    _positive("dilated", d)

    def pattern(nk: int, nq: int) -> EdgeList:
        steps, stride = min(w, nk), min(d, nk)  # past the sequence either way: the same edges
        return _offsets(nk, nq, torch.arange(-steps, steps + 1) * stride)

    return _named(pattern, f"dilated:{w},{d}")


def global_tokens(g: int) -> Pattern:
    """The first g tokens attend to every key and every query attends to them; built in
    O(edges), as (g + n) * g edges are few where the n^2 pairs are not."""
    _positive("global", g)

    def pattern(nk: int, nq: int) -> EdgeList:
        gk, gq = min(g, nk), min(g, nq)
        to_globals = (torch.arange(gk).repeat(nq), torch.arange(nq).repeat_interleave(gk))
        from_globals = (torch.arange(gk, nk).repeat(gq), torch.arange(gq).repeat_interleave(nk - gk))
        return torch.cat([to_globals[0], from_globals[0]]), torch.cat([to_globals[1], from_globals[1]])

    return _named(pattern, f"global:{g}")


def block(b: int) -> Pattern:
    """Query j attends to the keys of its block of b positions (O(edges), not O(n^2))."""
    _positive("block", b)

    def pattern(nk: int, nq: int) -> EdgeList:
        size = max(1, min(b, nk))  # one block holds the whole sequence either way: the same edges
        start = _centres(nk, nq) // size * size
        u = (start[:, None] + torch.arange(size)[None, :]).reshape(-1)
        v = torch.arange(nq).repeat_interleave(size)
        keep = u < nk
        return u[keep], v[keep]

    return _named(pattern, f"block:{b}")


def random_links(r: int, seed: int = 0) -> Pattern:
    """Each query j gets r keys (fewer if there are fewer), drawn from an RNG seeded by
    (seed, j, num_keys): reproducible, and the same whatever the number of queries."""
    return _random(r, seed, causal=False)


def _random_causal(r: int, seed: int = 0) -> Pattern:
    """Causal random links: query j draws its r keys among 0..j (so they never depend on later tokens)."""
    return _random(r, seed, causal=True)


def _random(r: int, seed: int, causal: bool) -> Pattern:
    _positive("random", r)

    def pattern(nk: int, nq: int) -> EdgeList:
        us, vs = [], []
        for j in range(nq):
            # A causal query's draw must not depend on the sequence length (decoding grows it).
            rng = random.Random(f"{seed}-{j}-{'causal' if causal else nk}")
            candidates = min(j + 1, nk) if causal else nk
            keys = rng.sample(range(candidates), min(r, candidates))
            us += keys
            vs += [j] * len(keys)
        return torch.tensor(us, dtype=torch.int64), torch.tensor(vs, dtype=torch.int64)

    if not causal:  # its causal pairs would be drawn among all keys: they would change as decoding adds keys
        pattern.causal_form = lambda: _random_causal(r, seed)
    return _named(pattern, f"{'causal-' if causal else ''}random:{r},{seed}")


def tree(k: int) -> Pattern:
    """BP-Transformer's binary-partition graph: each token attends to k spans per level and side;
    the graph gains span nodes, numbered after the tokens (`graphformer.graphs.tree`)."""
    _positive("tree", k)

    def pattern(nk: int, nq: int) -> EdgeList:
        if nk != nq:
            raise UserError(f"attention pattern tree:{k} adds span nodes to the source and serves --enc-attention only")
        return tree_graph.edges(nk, k)

    pattern.adds_span_nodes = True
    return _named(pattern, f"tree:{k}")


def adds_span_nodes(pattern: Pattern) -> bool:
    """Whether the pattern's graph has span nodes besides the tokens (``tree``)."""
    return getattr(pattern, "adds_span_nodes", False)


def make_causal(pattern: Pattern) -> Pattern:
    """The pairs of ``pattern`` with key <= query; a pattern whose pairs so kept would not be
    prefix-stable (``random``, which draws among all keys) gives its own ``causal_form``."""
    if adds_span_nodes(pattern):
        spec = getattr(pattern, "spec", "custom")
        raise UserError(
            f"attention pattern 'causal-{spec}': {spec} adds span nodes to the source and has no causal "
            f"form; give it without causal-, to --enc-attention only"
        )
    if hasattr(pattern, "causal_form"):
        return pattern.causal_form()

    def causal_pattern(nk: int, nq: int) -> EdgeList:
        u, v = pattern(nk, nq)
        keep = u <= v
        return u[keep], v[keep]

    return _named(causal_pattern, "causal-" + getattr(pattern, "spec", "custom"))


def union(*patterns: Pattern) -> Pattern:
    """Edges in any of the patterns (each pair once)."""
    if sum(adds_span_nodes(p) for p in patterns) > 1:
        raise UserError("a union may hold one tree pattern at most (each would add its own span nodes)")

    def combined(nk: int, nq: int) -> EdgeList:
        pairs = [p(nk, nq) for p in patterns]
        u = torch.cat([e[0] for e in pairs])
        v = torch.cat([e[1] for e in pairs])
        width = max(nk, int(u.max()) + 1 if len(u) else 1)  # span nodes come after the keys
        return unique_pairs(u, v, width)

    combined.adds_span_nodes = any(adds_span_nodes(p) for p in patterns)
    if any(hasattr(p, "causal_form") for p in patterns):
        combined.causal_form = lambda: union(*(make_causal(p) for p in patterns))
    return _named(combined, "+".join(getattr(p, "spec", "custom") for p in patterns))


def from_edges(pairs: Iterable[tuple[int, int]], name: str = "edges") -> Pattern:
    """A fixed list of (key, query) pairs of whole numbers of at least 0; pairs outside the current
    lengths are dropped."""
    pairs = list(pairs)
    for pair in pairs:
        if len(pair) != 2 or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0 for i in pair
        ):
            raise UserError(f"pattern {name!r}: {pair!r} is no (key, query) pair of whole numbers of at least 0")
    pairs = torch.tensor(pairs, dtype=torch.int64).view(-1, 2)

    def pattern(nk: int, nq: int) -> EdgeList:
        keep = (pairs[:, 0] < nk) & (pairs[:, 1] < nq)
        return pairs[keep, 0], pairs[keep, 1]

    return _named(pattern, name)


def from_networkx(graph, name: str = "networkx") -> Pattern:
    """A networkx (Di)Graph on integer token positions: edge (a, b) lets query b attend to key a
    (an undirected graph gives both directions)."""
    edges = list(graph.edges())
    if not graph.is_directed():
        edges += [(b, a) for a, b in edges]
    return from_edges(edges, name)


def _named(fn: Pattern, spec: str) -> Pattern:
    fn.spec = spec
    return fn


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise UserError(f"attention pattern {name}: the size must be a positive integer, got {value}")


full.spec, causal.spec = "full", "causal"

# The patterns by name: graphformer.catalog.PATTERNS (each entry's target is a builder taking its
# integer arguments, or, for an entry without arguments, the pattern itself).
NAMES = PATTERN_NAMES


def arity(arguments: str) -> tuple[int, ...]:
    """How many integers a pattern's ``arguments`` (``"W,D"``, ``"R[,SEED]"``) allow: (2,), (1, 2)."""
    required, _, optional = arguments.partition("[")
    least = len([a for a in required.split(",") if a])
    return tuple(range(least, least + len([a for a in optional.rstrip("]").split(",") if a]) + 1))


def _parse_one(term: str) -> Pattern:
    causal_prefix = term.startswith("causal-")
    name, _, args = term.removeprefix("causal-").partition(":")
    if name not in PATTERNS:
        known = [*NAMES, *(f"causal-{n}" for n in NAMES), *SAMPLE_TERMS]  # the command line takes sample terms too
        hint = did_you_mean(term.partition(":")[0], known)
        raise UserError(
            f"unknown attention pattern {term!r}{hint}; known: {', '.join(NAMES)} (with causal- prefix and + for unions)"
        )
    allowed = arity(PATTERNS.entry(name).details.get("arguments", ""))
    if allowed == (0,):
        if args:
            raise UserError(f"attention pattern {term!r}: {name} takes no argument; write {name}")
        base = PATTERNS[name]
    else:
        try:
            values = [int(a) for a in args.split(",")] if args else []
        except ValueError:
            raise UserError(f"attention pattern {term!r}: arguments must be integers, e.g. window:8") from None
        if len(values) not in allowed:
            raise UserError(
                f"attention pattern {term!r}: {name} takes {' or '.join(map(str, allowed))} "
                f"integer argument(s), e.g. {name}:{','.join(['4'] * allowed[0])}"
            )
        base = PATTERNS[name](*values)
    return make_causal(base) if causal_prefix and base is not causal else base


def parse(spec: str) -> Pattern:
    """A pattern from a string such as ``"window:8+global:1"`` or ``"causal-window:4"``."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("empty attention pattern; give e.g. full, window:8 or window:8+global:1")
    terms = spec.replace(" ", "").split("+")
    if any(not t for t in terms):
        raise UserError(f"malformed attention pattern {spec!r}: empty term around '+'")
    patterns = [_parse_one(t) for t in terms]
    return patterns[0] if len(patterns) == 1 else _named(union(*patterns), spec)
