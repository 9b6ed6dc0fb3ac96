"""Rollout and flow on demand: how much each input token reaches each query, on any input line.

    run = load("runs/copy")
    source, edges = encode_inputs(run, ["a b c"])
    (rolled,) = rollout_lines(run, source, edges, "cross")
    rolled.maps["cross"][0, 0]        # (outputs, source nodes): the shares drawn

Each line is decoded as ``graphformer attend`` decodes it (`graphformer.viz.on_demand`), then run
once more, teacher-forced on what it decoded, and its maps by layer, or by ACT step for a
universal model (`graphformer.viz.step_maps.any_model_maps`), are composed by
`graphformer.viz.step_rollout.composed`. A composition is a one-layer, one-head map, so it is kept
where `Attended` keeps maps (``edges[sublayer]``; ``maps[sublayer]`` is its (1, 1, queries, keys)
dense form), and ``--save-maps`` and the heatmap read it as they read attention.

A per-sample encoder graph (a parse tree, ``--edges``) comes with its edges (``graph``), and the
row of one query node (``query``; default the node a classifier reads: `<cls>`, else `</s>`, where
a parse tree joins its root; the last output on 'dec' and 'cross') is what the graph view colours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphformer.errors import UserError
from graphformer.running.loaded import LoadedRun
from graphformer.viz.on_demand import Attended, decoded_lines
from graphformer.viz.step_maps import any_model_maps
from graphformer.viz.step_rollout import composed

NEEDS = {"enc": ("enc",), "dec": ("dec",), "cross": ("enc", "dec", "cross")}  # the maps each composition reads
SPAN = {"enc": "enc", "dec": "dec", "cross": "dec"}  # whose layers or steps --layer counts


@dataclass
class Rolled(Attended):
    """One input line and its rollout or flow on one sub-layer (`Attended`'s fields, and these).

    Attributes:
        how: 'rollout' or 'flow'.
        rows: the query node of each row of the map (every query, or the one asked for).
        query: the query node whose row the graph view colours.
        graph: (queries, keys), each (E,) int64, the edges of the sample's own encoder graph, for
            'enc' and 'cross' where the encoder attends along per-sample edges; else None.
        depth: the layers (or ACT steps) composed.
    """

    how: str = "rollout"
    rows: list[int] | None = None
    query: int = 0
    graph: tuple[np.ndarray, np.ndarray] | None = None
    depth: int = 0

    @property
    def sublayer(self) -> str:
        return next(iter(self.edges))

    @property
    def shares(self) -> np.ndarray:
        """(rows, keys) the shares drawn."""
        return self.maps[self.sublayer][0, 0].numpy()


def default_query(run: LoadedRun, sublayer: str, queries: int) -> int:
    """The query node drawn on the graph: a classifier's `<cls>` (node 0) where it has one, else
    the last query (`</s>` on 'enc', the last output on 'dec' and 'cross')."""
    return 0 if sublayer == "enc" and run.model.make_pool().cls_node else queries - 1


def check_query(query: int | None, queries: list[str], sublayer: str, number: int) -> None:
    """A UserError where ``query`` is not one of the ``queries`` (their tokens) of input line ``number``."""
    if query is not None and not 0 <= query < len(queries):
        raise UserError(
            f"--query {query} is not a {sublayer} query of input line {number}, which has {len(queries)} "
            f"(0 to {len(queries) - 1}: {' '.join(queries[:3])}{' ...' if len(queries) > 3 else ''})"
        )


def top_layer(maps: dict, sublayer: str, layer: int | None, number: int) -> int | None:
    """``layer`` (negative: from the last) as the index of the last layer or step to compose;
    a UserError where a universal model's input ran fewer steps than that."""
    if layer is None:
        return None
    ran = maps[SPAN[sublayer]].layers
    if not -ran <= layer < ran:
        raise UserError(
            f"--layer {layer}: every {SPAN[sublayer]} query of input line {number} halted within {ran} ACT "
            f"step{'s' * (ran != 1)}, so there is no step {layer} to compose up to; choose a step from 0 to {ran - 1}"
        )
    return range(ran)[layer]


def sample_graph(run: LoadedRun, sublayer: str, maps: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The (queries, keys) edges of the sample's own encoder graph (O(edges), never a nodes x nodes
    array), where the encoder attends along per-sample edges and the shares are over its nodes
    ('enc', 'cross'); else None."""
    own = {etype[1] for etype in run.model.make_pool().sample_terms}
    if "enc" not in own or sublayer == "dec":
        return None
    return maps["enc"].queries.numpy(), maps["enc"].keys.numpy()


def compose_line(run, batch, tokens: dict, sublayer: str, how: str, query, layer, number: int) -> dict:
    """`Rolled`'s fields but the line and its output, of one decoded line: its ``batch`` and its
    axes' ``tokens`` by sub-layer (`graphformer.viz.on_demand.axis_tokens`)."""
    maps, ponder = any_model_maps(run.model, batch, NEEDS[sublayer])
    queries, keys = tokens[sublayer]
    check_query(query, queries, sublayer, number)
    top = top_layer(maps, sublayer, layer, number)
    rows = list(range(len(queries))) if query is None else [query]
    try:
        shares = composed(maps, sublayer, how, rows, top)
    except ValueError as error:  # flow past its limit: the input and queries are checked above
        raise UserError(f"input line {number}: {error} (--query N asks for one)") from None
    steps = ponder.get(SPAN[sublayer])
    return {
        "edges": {sublayer: shares[None, None]},
        "tokens": {sublayer: ([queries[r] for r in rows], keys)},
        "ponder": {} if steps is None else {sublayer: [int(steps[r]) for r in rows]},
        "how": how,
        "rows": rows,
        "query": default_query(run, sublayer, len(queries)) if query is None else query,
        "graph": sample_graph(run, sublayer, maps),
        "depth": maps[SPAN[sublayer]].layers if top is None else top + 1,
    }


def rollout_lines(
    run: LoadedRun,
    source,
    edges=None,
    sublayer: str = "cross",
    how: str = "rollout",
    query: int | None = None,
    layer: int | None = None,
    beam: int = 5,
    alpha: float | None = None,
) -> list[Rolled]:
    """Decode each encoded line (`graphformer.viz.on_demand.decoded_lines`) and
    compose its maps on ``sublayer``; results in input order. ``query``: draw that query's row
    alone (every row where None); ``layer``: compose up to that layer or step (all where None)."""
    results = []
    for number, decoded in enumerate(decoded_lines(run, source, edges, beam, alpha), 1):
        tokens = decoded.tokens
        if sublayer == "cross":  # the composition reaches every encoder node: a tree pattern's spans too
            tokens["cross"] = (tokens["cross"][0], tokens["enc"][1])
        fields = compose_line(run, decoded.batch, tokens, sublayer, how, query, layer, number)
        results.append(Rolled(decoded.line, output=decoded.output, probability=decoded.probability, **fields))
    return results
