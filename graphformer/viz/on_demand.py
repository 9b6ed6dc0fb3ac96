"""Attention on demand: the maps a trained model attends with on any input line.

    run = load("runs/copy")
    source, edges = encode_inputs(run, ["a b c"])
    results = attend_lines(run, source, edges)
    results[0].edges["cross"]         # an EdgeMaps: the weights of every edge, O(edges)
    results[0].maps["cross"]          # the same dense, (layers, heads, queries, keys): short inputs only

(`graphformer.viz.attend` does all of it, and writes the pictures, in one call.)

Each line is decoded as ``translate`` decodes it (a classifier's label is its argmax), then run
through the model once more, teacher-forced on what it decoded: a decoder's queries are its
inputs ``<s>, y1, ..., ym``, the decoded tokens shifted right, so the maps are those the model
attended with while it wrote that output. `sublayer_maps` is the one place the maps are computed,
as edges (`graphformer.viz.edge_maps.EdgeMaps`), so a ListOps line of 2,000 tokens costs memory
in its edges; `shown` densifies only what a view draws, in blocks where it is long
(`graphformer.viz.binned`).

A universal model has ACT steps where a Transformer has layers: its maps' layers axis is the steps
axis (`graphformer.viz.step_maps`), a row is blank (NaN) at the steps after its query halted,
``Attended.ponder`` holds the steps each query took, and ``--layer`` picks a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import torch

from graphformer.choices import SUBLAYERS
from graphformer.decoding import translate_ids
from graphformer.decoding.inputs import SourceLines, encode_lines, source_limit
from graphformer.errors import ConfigError, UserError
from graphformer.graphs import GraphBatch, make_batch
from graphformer.graphs.sample_edges import edges_of_lines
from graphformer.running.loaded import LoadedRun
from graphformer.viz.binned import Drawn, drawn
from graphformer.viz.edge_maps import EdgeMaps
from graphformer.viz.recording import AXES, CLS_TOKEN, span_tokens
from graphformer.viz.step_maps import any_model_maps
from graphformer.vocab import EOS, SOS


@dataclass
class Attended:
    """One input line and the maps its model attended with.

    Attributes:
        line: the input's tokens, joined by spaces (as the model reads it).
        edges: {sub-layer: `EdgeMaps`}, the weight of every edge of the line's graph (a dense
            (layers, heads, queries, keys) tensor given here is read as its edges).
        tokens: {sub-layer: (query tokens, key tokens)}, the strings each map's rows and columns show.
        output: the decoded line (detokenized, as ``translate`` writes it), or a classifier's label.
        probability: a classifier's probability of its label; None for a translation.
    """

    line: str
    edges: dict[str, EdgeMaps]
    tokens: dict[str, tuple[list[str], list[str]]]
    output: str
    probability: float | None = None
    axes: dict[str, tuple[str, str]] = field(default_factory=lambda: dict(AXES))  # (key axis, query axis)
    ponder: dict[str, list[int]] = field(default_factory=dict)  # a universal model's steps per query node

    def __post_init__(self):
        # A map computed dense elsewhere (a rollout's (1, 1, queries, keys)) is kept as its edges too.
        self.edges = {s: m if isinstance(m, EdgeMaps) else EdgeMaps.of_record(s, m) for s, m in self.edges.items()}

    @property
    def maps(self) -> dict[str, torch.Tensor]:
        """{sub-layer: (layers, heads, queries, keys)} dense, NaN where there is no edge: costs
        queries x keys a map, so for short lines; the views draw from `edges` (`shown`)."""
        return {sublayer: maps.dense() for sublayer, maps in self.edges.items()}

    @property
    def unit(self) -> str:
        """What the maps' first axis counts: a universal model's ACT steps, or layers."""
        return "step" if self.ponder else "layer"

    @property
    def title(self) -> str:
        """What the picture's title says the model made of the line."""
        if self.probability is not None:
            return f"predicted label {self.output} (probability {self.probability:.2f})"
        return f"output: {self.output or '(empty: the model ended it at once)'}"


def load(run: str | Path | LoadedRun, checkpoint: str = "best") -> LoadedRun:
    """``run`` itself, or the run directory it names loaded with its ``checkpoint``."""
    return run if isinstance(run, LoadedRun) else LoadedRun(run, checkpoint)


def encode_inputs(run: LoadedRun, lines: list[str], edges: str | Path | None = None):
    """(`SourceLines`, each line's sample edges or None) of ``lines``: every line must be non-empty
    and fit the model's positional table (unlike ``translate``, which cuts a long line: a map of
    part of the input would mislead). Tokens outside the vocabulary read as ``<unk>`` and are
    counted in ``SourceLines.unknown`` for the caller to warn of."""
    if not lines:
        raise UserError("no input to attend on; give --input TEXT or --input-file FILE")
    pool = run.model.make_pool()
    tokenize, _ = run.pipelines()
    limit = source_limit(run.model, pool)
    source = encode_lines(lines, tokenize, run.src_vocab, limit)
    for number, words in enumerate(source.words, 1):
        if not words:
            raise UserError(f"input line {number} is empty; give text to attend on")
    if source.truncated:
        number, length = source.truncated[0]
        raise UserError(
            f"input line {number} has {length} tokens, more than the {limit} the model's positional table "
            f"(max_len {run.model.cfg.max_len}) holds; shorten it"
        )
    return source, edges_of_lines(pool, source.words, edges)


def check_choice(run: LoadedRun, sublayer: str | None, layer: int | None, head: int | None) -> tuple[str, ...]:
    """The sub-layers to map: ``sublayer``, or all the model has; a one-line UserError for a
    sub-layer, layer or head the model does not have."""
    cfg = run.model.cfg
    has = ("enc",) if cfg.classifies else SUBLAYERS
    if sublayer is not None and sublayer not in has:
        why = "an encoder classifier attends with enc only" if cfg.classifies else f"choose one of {', '.join(has)}"
        raise UserError(f"the model has no {sublayer} attention: {why}")
    # A ConfigError: the command line names the option, --layer, --head.
    if run.model.records_maps:
        layers, has_layers = cfg.layers, f"the model has {cfg.layers} layer{'s' * (cfg.layers != 1)}"
    else:  # a universal model's --layer picks an ACT step
        layers, has_layers = (
            cfg.max_depth,
            f"a step (from 0) of the universal model, which runs at most {cfg.max_depth}",
        )
    if layer is not None and not -layers <= layer < layers:
        raise ConfigError("layer", f"{layer} is out of range: {has_layers}")
    if head is not None and not 0 <= head < cfg.heads:
        raise ConfigError("head", f"{head} is out of range: the model has {cfg.heads} heads (0 to {cfg.heads - 1})")
    return has if sublayer is None else (sublayer,)


def sublayer_maps(model, batch, sublayers: tuple[str, ...]) -> tuple[dict[str, EdgeMaps], dict[str, list[int]]]:
    """{sub-layer: `EdgeMaps`} of the batch's one sample, and for a universal model {sub-layer:
    steps each query took} (its maps' layers axis is the steps): the one function that computes
    maps for `attend`, in O(edges)."""
    maps, ponder = any_model_maps(model, batch, sublayers)
    return maps, {s: p.tolist() for s, p in ponder.items()}


class DecodedLine(NamedTuple):
    """One input line decoded, and the batch that runs the model over it teacher-forced."""

    line: str  # its tokens joined by spaces
    batch: GraphBatch  # the line and its decoded output (or label), on the model's device
    tokens: dict[str, tuple[list[str], list[str]]]  # {sub-layer: (query tokens, key tokens)}
    output: str  # the detokenized output, or a classifier's label
    probability: float | None  # a classifier's probability of its label; None for a translation


def decoded_lines(run: LoadedRun, source: SourceLines, edges=None, beam: int = 5, alpha: float | None = None):
    """Each encoded line decoded as ``translate`` decodes it, as a `DecodedLine`, in input order:
    what `attend_lines` maps and `graphformer.viz.rolled.rollout_lines` composes."""
    pool = run.model.make_pool()
    searched = {} if alpha is None else {"alpha": alpha}
    hyps = translate_ids(run.model, source.ids, beam=beam, pool=pool, edges=edges, **searched)
    _, detokenize = run.pipelines()
    device = next(run.model.parameters()).device
    for i, (line_ids, hyp) in enumerate(zip(source.ids, hyps)):
        given = None if edges is None else [edges[i]]
        batch = make_batch(pool, [line_ids], [hyp.tokens], given).to(device)
        decoded = [run.tgt_vocab.itos[t] for t in (SOS, *hyp.tokens)]
        tokens = axis_tokens(pool, [*source.words[i], run.src_vocab.itos[EOS]], decoded)
        if run.model.cfg.classifies:
            label, probability = run.tgt_vocab.itos[hyp.tokens[0]], math.exp(hyp.log_prob)
        else:
            label, probability = detokenize(run.tgt_vocab.decode(hyp.tokens)), None
        yield DecodedLine(" ".join(source.words[i]), batch, tokens, label, probability)


def attend_lines(
    run: LoadedRun,
    source: SourceLines,
    edges=None,
    sublayers: tuple[str, ...] = SUBLAYERS,
    beam: int = 5,
    alpha: float | None = None,
) -> list[Attended]:
    """Decode each encoded line and map the attention it was decoded with (see the module's
    docstring); results in input order."""
    results = []
    for decoded in decoded_lines(run, source, edges, beam, alpha):
        maps, ponder = sublayer_maps(run.model, decoded.batch, sublayers)
        shown = {s: decoded.tokens[s] for s in sublayers}
        results.append(Attended(decoded.line, maps, shown, decoded.output, decoded.probability, ponder=ponder))
    return results


def check_steps(results: list[Attended], layer: int | None) -> None:
    """A one-line UserError where a universal model's chosen step (``layer``) is past the steps
    an input's queries pondered on a sub-layer: all had halted, and there is no map to draw."""
    if layer is None:
        return
    for number, attended in enumerate(results, 1):
        for sublayer, maps in attended.edges.items():
            ran = maps.layers
            if attended.ponder and not -ran <= layer < ran:
                raise UserError(
                    f"--layer {layer}: every {sublayer} query of input line {number} halted within {ran} ACT "
                    f"step{'s' * (ran != 1)}, so step {layer} has no map there; choose a step from 0 to {ran - 1}"
                )


def axis_tokens(pool, source: list[str], decoder_inputs: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """{sub-layer: (query tokens, key tokens)} from the ``source`` tokens (ending in ``</s>``)
    and the ``decoder_inputs`` ``<s>, y1, ..., ym`` (the decoded tokens shifted right): the source
    as the graph holds it, a classifier's ``<cls>`` first and a tree pattern's span nodes after it
    on enc."""
    src = [CLS_TOKEN] * pool.cls_node + source
    enc = src + (span_tokens(len(src)) if pool.span_nodes(len(src)) else [])
    tgt = decoder_inputs
    return {"enc": (enc, enc), "dec": (tgt, tgt), "cross": (tgt, src)}


def shown(
    attended: Attended, sublayer: str, layer: int | None, head: int | None, top: int | None = None
) -> tuple[Drawn, list[int], list[int]]:
    """What a view draws of ``sublayer``: its chosen ``layer`` and ``head`` (every one where None),
    with ``top``, each query's ``top`` strongest keys alone, as `graphformer.viz.binned.drawn`
    gives them (dense where short, in blocks where long); and the numbers of the layers (from 1)
    and of the heads it holds."""
    maps = attended.edges[sublayer]
    layers = list(range(maps.layers)) if layer is None else [range(maps.layers)[layer]]
    heads = list(range(maps.weights.shape[1])) if head is None else [head]
    maps = replace(maps, weights=maps.weights[layers][:, heads])
    if top is not None:
        maps = maps.keep_top(top)
    queries, keys = attended.tokens[sublayer]
    return drawn(maps, queries, keys), [n + 1 for n in layers], heads
