"""Hyper-parameters of the models, declared once (see `graphformer.config_io`).

Importing this module costs neither torch nor DGL: the command line builds its options from it.
The defaults train a good copy-task model in a few minutes on 2 CPU cores (``examples/copy``;
its figures are in ``docs/results.md``); the paper's base model is ``layers=6, d_model=512,
heads=8, d_ff=2048``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial

from graphformer.catalog import MODELS
from graphformer.choices import SUBLAYERS
from graphformer.config_io import AT_LEAST_1, NON_NEGATIVE, PROBABILITY, DictConfig, Range, option
from graphformer.errors import ConfigError
from graphformer.model.edge_spec import backend_needs, edges_help, field_of, parse_edges, per_sample_types

# The kinds of model, their capabilities and classes: graphformer.catalog.MODELS (live names: a
# plugin's kinds are in them), and which options apply to each, without torch (for --help and `check`).
MODEL_NAMES = MODELS.names()
CLASSIFIERS = MODELS.names("classifies")  # one label per sample (graphformer.model.classifier)
UNIVERSALS = MODELS.names("universal")  # a shared layer repeated with ACT (graphformer.model.universal)
POSITIONS = ("sinusoidal", "learned", "none")
TYING = ("none", "decoder", "all")
POOLINGS = ("cls", "mean", "last")
# The most positions a positional table may hold: it is allocated whole (max_len x d_model), and
# 2**17 is 16 times the longest context the long-range tasks generate.
MAX_TABLE_POSITIONS = 2**17
UNIVERSAL_ONLY = ("max_depth", "act_threshold", "ponder_weight")
ENCODER_ONLY = ("pooling",)
DECODER_ONLY = ("dec_attention", "cross_attention", "dec_edges", "cross_edges", "tie")


def model_help() -> str:
    """The kinds of model as ``train --help`` lists them (graphformer.catalog.MODELS)."""
    from graphformer.data.tasks import classification_tasks

    kinds = "; ".join(f"{e.name}: {e.summary}" for e in MODELS.entries())
    return f"{kinds}; the classifiers ({', '.join(CLASSIFIERS)}) take the tasks {', '.join(classification_tasks())}"


@dataclass
class ModelConfig(DictConfig):
    """Hyper-parameters of a ``GraphTransformer``, ``UniversalTransformer`` or ``EncoderClassifier``
    (saved with every checkpoint). Build the model with ``graphformer.model.build_model(cfg)``, its
    graph pool (without the model) with ``cfg.graph_pool()``."""

    src_vocab: int = option(help="source vocabulary size", range=AT_LEAST_1, cli=False)
    tgt_vocab: int = option(help="target vocabulary size", range=AT_LEAST_1, cli=False)
    model: str = option("transformer", model_help, choices=MODEL_NAMES)
    layers: int = option(2, "layers per side (transformer, encoder)", range=AT_LEAST_1)
    d_model: int = option(128, "width of every node's hidden state", range=Range(low=2))
    heads: int = option(4, "attention heads (must divide d_model)", range=AT_LEAST_1)
    d_ff: int = option(256, "hidden width of the feed-forward sub-layers", range=AT_LEAST_1)
    dropout: float = option(0.1, "dropout on sub-layer outputs and embeddings", range=PROBABILITY)
    norm_first: bool = option(True, "layer norm before each sub-layer (pre-norm); --no-norm-first: after (post-norm)")
    positions: str = option(
        "sinusoidal",
        "positional encoding; none: order comes only from the attention pattern (a causal one, e.g. causal-window:1)",
        choices=POSITIONS,
    )
    max_len: int = option(256, "longest sequence the positional table holds", range=AT_LEAST_1)
    tie: str = option(
        "none",
        "share the target embedding with the generator (decoder), and the source "
        "embedding too (all: needs one vocabulary for both sides)",
        choices=TYING,
    )
    enc_attention: str = option("full", "encoder self-attention pattern, e.g. window:8+global:1", metavar="SPEC")
    dec_attention: str = option(
        "causal", "decoder self-attention pattern (causal), e.g. causal-window:8", metavar="SPEC"
    )
    cross_attention: str = option("full", "target -> source attention pattern, e.g. window:2", metavar="SPEC")
    enc_edges: str = option("none", partial(edges_help, "enc"), metavar="SPEC")
    dec_edges: str = option("none", partial(edges_help, "dec"), metavar="SPEC")
    cross_edges: str = option("none", partial(edges_help, "cross"), metavar="SPEC")
    pooling: str = option(
        "cls",
        "encoder: what the label is read from: cls: a global <cls> node placed first "
        "(the encoder pattern gets +global:1: it reads every token, every token reads it); "
        "mean: the mean of the token nodes; last: the final node, </s>, which comes right "
        "after recall's query (neither adds a node: local patterns stay local)",
        choices=POOLINGS,
    )
    max_depth: int = option(8, "universal models: most steps per token", range=AT_LEAST_1)
    act_threshold: float = option(
        0.99,
        "universal models: halt once the summed halting probability exceeds this",
        range=Range(low=0, high=1, open_low=True),
    )
    ponder_weight: float = option(0.01, "universal models: weight of the ponder cost in the loss", range=NON_NEGATIVE)

    def check(self) -> None:
        super().check()
        if self.d_model % self.heads:
            raise ConfigError("d_model", f"({self.d_model}) must be divisible by the number of heads ({self.heads})")
        if self.d_model % 2:
            raise ConfigError("d_model", f"must be even for positional encodings, got {self.d_model}")
        if self.positions != "none" and self.max_len > MAX_TABLE_POSITIONS:
            raise ConfigError(
                "max_len",
                f"must be at most {MAX_TABLE_POSITIONS} with a table of {self.positions} "
                f"positions (allocated whole), got {self.max_len}; --positions none has no table",
            )
        if self.model not in UNIVERSALS:
            self._refuse_changed(
                UNIVERSAL_ONLY,
                "and the other adaptive computation time options apply only to "
                f"the universal models (model {' or '.join(UNIVERSALS)})",
            )
        if not self.classifies:
            self._refuse_changed(
                ENCODER_ONLY, f"applies only to the encoder classifiers (model {' or '.join(CLASSIFIERS)})"
            )
        else:
            self._refuse_changed(
                DECODER_ONLY,
                f"applies to models with a decoder; the encoder classifier (model={self.model!r}) has none",
            )
        if self.tie == "all" and self.src_vocab != self.tgt_vocab:
            raise ConfigError("tie", "'all' needs one vocabulary for source and target (equal sizes)")
        self.graph_pool()  # parses and checks the attention patterns and edge specs: fails early, with their own message

    def edge_terms(self, sublayer: str) -> tuple:
        """What the attention sub-layer ``sublayer`` ('enc', 'dec', 'cross') does with its edges' types
        (`graphformer.model.edge_spec.EdgeTerm`s; none for a saved run from before the option)."""
        spec = getattr(self, f"{sublayer}_edges")
        return parse_edges("none" if spec is None else spec, sublayer)

    def backend_needs(self) -> set[str]:
        """The `graphformer.catalog.BACKENDS` capabilities the model's edge uses need of a backend."""
        return set().union(*(backend_needs(self.edge_terms(r)) for r in self._sublayers()))

    def _sublayers(self) -> tuple[str, ...]:
        return ("enc",) if self.classifies else SUBLAYERS

    def graph_pool(self):
        """The `graphformer.graphs.GraphPool` whose batches the model of this config reads: a
        classifier's holds source graphs only (with a `<cls>` node where `cls_node`), a sequence
        model's the encoder, decoder and cross patterns. Sub-layers whose edge types come with each
        sample (a parse tree's roles) name them to the pool."""
        from graphformer.graphs.pool import GraphPool  # torch: only once a config is made, never for --help

        typed = per_sample_types({r: self.edge_terms(r) for r in self._sublayers()})
        try:
            if self.classifies:
                return GraphPool(self.enc_attention, targets=False, cls_node=self.cls_node, edge_types=typed)
            return GraphPool(self.enc_attention, self.dec_attention, self.cross_attention, edge_types=typed)
        except ConfigError as err:  # the pool names its edge_types[sublayer]; the user wrote --{sublayer}-edges
            sublayer = next((r for r in typed if err.name == f"edge_types[{r!r}]"), None)
            if sublayer is None:
                raise
            raise ConfigError(field_of(sublayer), err.problem) from None

    def _refuse_changed(self, names: tuple[str, ...], why: str) -> None:
        changed = [
            f.name for f in fields(self) if f.name in names and getattr(self, f.name) not in (None, f.default)
        ]  # None: runs saved before they existed
        if changed:
            raise ConfigError(changed[0], why)

    @property
    def classifies(self) -> bool:
        """Whether the model gives one label per sample (an encoder classifier) rather than a sequence."""
        return self.model in CLASSIFIERS

    @property
    def cls_node(self) -> bool:
        """Whether each source gets a global `<cls>` node placed first: a classifier pooling ``cls``."""
        return self.classifies and self.pooling == "cls"


def unused_layers(model: str) -> str | None:
    """Why ``layers`` does not apply to this model (a universal one), or None if it does."""
    if model in UNIVERSALS:
        return f"layers does not apply to model {model!r}, which repeats one shared layer up to max_depth times"
    return None
