"""Attention maps recorded during training: ``RUN_DIR/attention/epoch_NNNN.pt``, one per recorded
epoch (epoch 0: the untrained model), each holding the maps of every attention sub-layer of the
model (an encoder-decoder's three, an encoder classifier's ``enc``) for the first validation
sample; and the pictures `graphformer animate` and `graphformer heatmap` draw of them.

The maps are kept as edges, under ``edges``: ``{sublayer: EdgeMaps.as_record()}`` (keys, queries,
weights (layers, heads, E), n_queries, n_keys), so a sample of thousands of tokens on a sparse
or per-sample graph records in O(edges); `recorded_maps` reads them, and the dense (layers, heads,
queries, keys) arrays that recordings made before held under ``maps``. A long map is drawn in
blocks of tokens (`graphformer.viz.binned`). An epoch's recording holds at most
`MAX_RECORDED_WEIGHTS` weights: a first validation sample with more is refused before training.

A universal model's recording holds its maps per ACT step where a Transformer's holds them per
layer (`graphformer.viz.step_maps`), padded with blank steps to ``max_depth`` so every epoch has
the same, and under ``ponder`` the steps each query took; its pictures draw every step as a panel
(`graphformer.viz.step_views.step_picture`).

Where the model reads its edges' types, a recording also keeps them under ``edge_types``:
``{sublayer: [entry per derivation]}``, each entry an `EdgeTypeMap.as_record` (the ids beside the
map, a name per id), for maps drawn a token a row (up to `binned.MAX_TOKEN_ROWS`): a block of
tokens has no one type. Recordings made before types were kept have no such key and draw as before.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from graphformer.errors import ConfigError, UserError
from graphformer.graphs import make_batch, tree
from graphformer.graphs.pool import CROSS, DEC, ENC
from graphformer.graphs.sample_types import GivenTypes
from graphformer.graphs.typed_edges import names_file, read_type_names
from graphformer.training import checkpoint
from graphformer.training.run_dir import RunDir
from graphformer.viz import binned, plots
from graphformer.viz.edge_maps import EdgeMaps, recorded_kinds
from graphformer.viz.long_tree import TreeMaps
from graphformer.viz.maps import SUBLAYERS
from graphformer.viz.plots import AttentionPicture
from graphformer.viz.step_maps import any_model_maps, pad_steps
from graphformer.viz.step_views import step_picture
from graphformer.viz.type_labels import EdgeTypeMap, describe
from graphformer.vocab import EOS, SOS, UNK

CLS_TOKEN = "<cls>"  # a classifier's global node (it carries the <s> token)

# The keys a recording keeps its tokens under (the strings its axes and nodes show): the names the
# first recordings gave them, so that every recording, older or newer, reads alike.
TOKEN_KEYS = {"src": "src_labels", "tgt": "tgt_labels", "enc": "enc_labels"}
TYPES_KEY = "edge_types"  # each sub-layer's edge types, where the model reads some
EDGES_KEY = "edges"  # each sub-layer's maps as edges; recordings made before held dense arrays under "maps"
DENSE_KEY = "maps"
PONDER_KEY = "ponder"  # a universal model's steps per query node, by sub-layer

# What the rows and columns of each sub-layer's map are (targets enter the decoder shifted right).
DECODER_INPUTS = "decoder inputs <s>, y1, ..."
AXES = {
    "enc": ("keys: source tokens", "queries: source tokens"),
    "dec": (f"keys: {DECODER_INPUTS}", f"queries: {DECODER_INPUTS}"),
    "cross": ("keys: source tokens", f"queries: {DECODER_INPUTS}"),
}


# The most weights (layers x heads x edges, over the sub-layers) an epoch's recording holds: 64 MB
# of float32 an epoch. Sparse and per-sample graphs of thousands of tokens fit well within it;
# full attention over a sample of a thousand tokens or more (a million edges a layer and head) may not.
MAX_RECORDED_WEIGHTS = 16_000_000
RELATIONS = {"enc": ENC, "dec": DEC, "cross": CROSS}


def check_map_size(model_cfg, split, pool, viz_every: int | None) -> None:
    """The maps of the recorded sample, the first of ``split``, must hold at most
    `MAX_RECORDED_WEIGHTS` weights over the sub-layers the model records (counted on its graph)."""
    if not viz_every:
        return
    depth = model_cfg.layers if model_cfg.model in recorded_kinds() else model_cfg.max_depth  # or ACT steps
    n, m = pool.source_nodes(len(split.src_words[0])), pool.target_nodes(len(split.tgt_words[0]))
    if depth * model_cfg.heads * (n * n + 2 * m * n + m * m) <= MAX_RECORDED_WEIGHTS:
        return  # an edge on every pair (a graph has one at most) would still fit: no graph to build
    # Before the vocabularies exist: the graph depends on the lengths (and given edges) alone.
    src, tgt = ([UNK] * len(split.src_words[0]),), ([UNK] * len(split.tgt_words[0]),)
    batch = make_batch(pool, src, tgt, split.edges_of([0]))
    sublayers = SUBLAYERS if pool.targets else ("enc",)
    edges = sum(batch.relation(RELATIONS[s]).num_edges for s in sublayers)
    weights = depth * model_cfg.heads * edges
    if weights > MAX_RECORDED_WEIGHTS:
        raise ConfigError(
            "viz_every",
            f"draws the first validation sample, whose maps would hold {weights:,} weights (edges x layers x "
            f"heads: {edges:,} x {depth} x {model_cfg.heads}), more than the {MAX_RECORDED_WEIGHTS:,} an epoch "
            "records: put a shorter sample first in valid, use a sparser attention pattern, or leave it out",
        )


def span_tokens(n: int) -> list[str]:
    """What the span nodes of a tree pattern over n tokens are drawn with: level and token range,
    e.g. ``L1[0:2)``, in node order (after the n tokens)."""
    tokens = []
    for level, count in enumerate(tree.levels(n), start=1):
        for index in range(count):
            first, end = index << level, min((index + 1) << level, n)
            tokens.append(f"L{level}[{first}:{end})")
    return tokens


def record_epoch(model, split, pool, src_vocab, tgt_vocab, run_dir: Path, epoch: int) -> Path | None:
    """Write the maps of the first sample of ``split`` to ``run_dir/attention/epoch_NNNN.pt``."""
    src, tgt = split.src[0], split.tgt[0]
    batch = make_batch(pool, [src], [tgt], split.edges_of([0])).to(next(model.parameters()).device)
    src_tokens = [CLS_TOKEN] * pool.cls_node + [src_vocab.itos[i] for i in src] + [src_vocab.itos[EOS]]
    n = len(src_tokens)
    spans = span_tokens(n) if pool.span_nodes(n) else []  # tree patterns only
    record = {"epoch": epoch, TOKEN_KEYS["src"]: src_tokens, TOKEN_KEYS["enc"]: src_tokens + spans}
    if pool.targets:
        record[TOKEN_KEYS["tgt"]] = [tgt_vocab.itos[SOS]] + [tgt_vocab.itos[i] for i in tgt]
    else:  # a classifier: its encoder is all it attends with
        record["label"] = tgt_vocab.itos[tgt[0]]
    maps, ponder = any_model_maps(model, batch, SUBLAYERS if pool.targets else ("enc",))
    record[EDGES_KEY], typed = {}, {}
    for sublayer, edges in maps.items():
        if ponder:  # a universal model: its steps, as many in every epoch
            edges = replace(edges, weights=pad_steps(edges.weights, model.cfg.max_depth))
        record[EDGES_KEY][sublayer] = edges.as_record()
        if edges.types and max(edges.n_queries, edges.n_keys) <= binned.MAX_TOKEN_ROWS:
            typed[sublayer] = [
                describe(derivation, spec, ids.numpy(), given_names(derivation, split, sublayer)).as_record()
                for spec, (derivation, ids) in edges.dense_types().items()
            ]
    if ponder:
        record[PONDER_KEY] = {sublayer: steps.tolist() for sublayer, steps in ponder.items()}
    if typed:  # a run without edge types records what it always did
        record[TYPES_KEY] = typed
    record["sample_graphs"] = [etype[1] for etype in pool.sample_terms]  # drawn as graphs of their own
    return RunDir(run_dir).save_attention(record, epoch)


def given_names(derivation, split, sublayer: str) -> list[str] | None:
    """The names of given types read from a typed edges file: its names file's, then the
    derivation's name for an unlisted edge; None for any other types (they name themselves)."""
    source = getattr(split.edges, "source", None)
    if not isinstance(derivation, GivenTypes) or source is None or not names_file(source, sublayer).is_file():
        return None
    return [*read_type_names(names_file(source, sublayer), derivation.declared), derivation.names[-1]]


def load_records(run_dir: str | Path) -> list[dict]:
    """Every recorded epoch of a run, oldest first."""
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir} is not a folder; give the run directory of a run trained with --viz-every N")
    paths = RunDir(run_dir).attention_files()
    if not paths:
        raise UserError(f"no attention maps recorded in {run_dir}; train with --viz-every N to record them")
    return [checkpoint.load(p, advice="delete it, or train again with --viz-every to record it") for p in paths]


def recorded_maps(record: dict) -> dict[str, EdgeMaps]:
    """{sub-layer: `EdgeMaps`} of a recorded epoch: its edges, or the dense arrays of a recording
    made before maps were kept as edges."""
    if EDGES_KEY in record:
        return {s: EdgeMaps.of_record(s, r) for s, r in record[EDGES_KEY].items()}
    return {s: EdgeMaps.of_record(s, dense) for s, dense in record[DENSE_KEY].items()}


def picture(
    record: dict, sublayer: str | None = None, layer: int = -1, head: int | str = 0, top: int | None = None
) -> AttentionPicture:
    """One head (``head=N``) or every head (``head='all'``) of one layer of a recorded epoch;
    ``sublayer`` defaults to ``cross``, or ``enc`` where that is all the run recorded; with ``top``,
    each query's ``top`` strongest keys alone. A long map is drawn in blocks of tokens."""
    recorded = recorded_maps(record)
    sublayer = sublayer or ("cross" if "cross" in recorded else "enc")
    maps = _checked(recorded, sublayer, layer, head, PONDER_KEY in record)
    chosen = list(range(maps.weights.shape[1])) if head == "all" else [head]
    stepped = PONDER_KEY in record  # a universal model's: every ACT step is a panel
    maps = replace(maps, weights=maps.weights[:, chosen] if stepped else maps.weights[[layer]][:, chosen])
    queries, keys = _recorded_tokens(record, sublayer)
    shown = maps if top is None else maps.keep_top(top)
    view = binned.drawn(shown, queries, keys)
    epoch = record["epoch"]
    when = f"epoch {epoch}" + (" (untrained)" if epoch == 0 else "")
    if "label" in record:
        when += f", label {record['label']}"
    shows = "".join(f"; {s}" for s in [f"top {top} keys per query"] * (top is not None) + [view.note] * view.binned)
    key_axis, query_axis = AXES[sublayer]
    layers = recorded[sublayer].layers
    layout = "tree" if sublayer in record.get("sample_graphs", ()) and sublayer != "cross" else "bipartite"
    drawn = AttentionPicture(
        maps=view.weights[0],
        keys=view.keys,
        queries=view.queries,
        panel_titles=[f"head {h}" for h in chosen],
        # counted from 1 (`--layer 0` is "layer 1 of 2"): "layer 1" reads as the first; the
        # panels name their heads
        title=f"{sublayer} layer {layer % layers + 1} of {layers}, {when}{shows}",
        key_axis=key_axis,
        query_axis=query_axis,
        layout=layout,
        types=None if view.binned else recorded_types(record, sublayer),
        blocks=view.note,
        tree=TreeMaps.of(shown, keys) if view.binned and layout == "tree" else None,  # drawn from its edges
    )
    if stepped:
        title = f"{sublayer} attention per ACT step, {when}{shows}"  # the panels name step and head
        ponder = None if view.binned else record[PONDER_KEY][sublayer]  # a block of queries has no one count
        return step_picture(drawn, view.weights, chosen, ponder, title)
    return drawn


def _checked(recorded: dict, sublayer: str, layer: int, head: int | str, stepped: bool) -> EdgeMaps:
    """``recorded[sublayer]``, once ``sublayer``, ``layer`` and ``head`` are known to be in it."""
    if sublayer not in recorded:
        raise ConfigError(
            "relation",  # the --relation option
            f"{sublayer} was not recorded in this run (an encoder classifier attends with "
            f"enc only); choose {' or '.join(recorded)}",
        )
    maps = recorded[sublayer]
    layers, heads = maps.weights.shape[:2]
    if stepped and layer != -1:
        raise ConfigError(
            "layer", f"{layer}: a universal run's recordings draw every ACT step as a panel; leave it out"
        )
    if not -layers <= layer < layers:
        raise ConfigError("layer", f"{layer} is out of range: the model has {layers} layer{'s' if layers != 1 else ''}")
    if head != "all" and not 0 <= head < heads:
        raise ConfigError("head", f"{head} is out of range: the model has {heads} heads")
    return maps


def _recorded_tokens(record: dict, sublayer: str) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of ``sublayer``'s recorded map."""
    src = record[TOKEN_KEYS["src"]]
    tgt = record.get(TOKEN_KEYS["tgt"])
    return {
        "enc": (record.get(TOKEN_KEYS["enc"], src),) * 2,  # enc: tokens, then any span nodes
        "dec": (tgt, tgt),
        "cross": (tgt, src),
    }[sublayer]


def recorded_types(record: dict, sublayer: str) -> EdgeTypeMap | None:
    """The edge types recorded with ``sublayer``'s map (the first derivation's, where its terms
    read several), or None for a sub-layer without them or a recording made before they were kept."""
    entries = record.get(TYPES_KEY, {}).get(sublayer)
    return EdgeTypeMap.of_record(entries[0]) if entries else None


class AttentionRecorder:
    """Attention maps recorded while a run trains (``viz_every``). The `Trainer` stands below
    `graphformer.viz` and never imports it; it is given a recorder (the command line makes one)
    and calls these methods."""

    def check_model(self, model_kind: str, viz_every: int) -> None:
        """Every kind of model records its maps (a universal one per ACT step): nothing to refuse."""

    def check_split(self, split, pool, viz_every: int, model_cfg) -> None:
        check_map_size(model_cfg, split, pool, viz_every)

    def record(self, model, split, pool, src_vocab, tgt_vocab, run_dir: Path, epoch: int) -> Path | None:
        return record_epoch(model, split, pool, src_vocab, tgt_vocab, run_dir, epoch)

    def pngs(self, path: Path) -> dict[str, bytes]:
        """Each sub-layer's last layer, every head, of the recording at ``path``, as PNG bytes."""
        record = checkpoint.load(path)
        return {
            sublayer: plots.png_bytes(plots.draw(picture(record, sublayer, layer=-1, head="all")))
            for sublayer in recorded_maps(record)
        }
