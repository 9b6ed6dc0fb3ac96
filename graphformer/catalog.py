"""The package's extension points and its own entries in them, one `register` call per choice.

Seven registries (`graphformer.registry.Registry`), each a mapping from name to the loaded object:

    BACKENDS      attention backends: ``attend(relation, q, k, v, return_weights=False)``, and
                  ``bias=`` (a `graphformer.attention.bias.EdgeBias`) where they serve one
    PATTERNS      attention patterns: a builder ``(*ints) -> pattern``, or, where the entry takes
                  no arguments, the pattern ``(num_keys, num_queries) -> (u, v)`` itself
    SAMPLE_TERMS  each sample's own edges: derived from its source tokens (``words -> (u, v)``
                  or a pattern of the sample) for one attention sub-layer, or given beside the data
    EDGE_TYPES    what an edge says: a builder ``(*ints) -> derivation`` of each edge's type id
                  (`graphformer.graphs.edge_types`)
    EDGE_USES     how attention uses an edge's type: an ``nn.Module`` class built as
                  ``(derivation, heads, d_head)`` (`graphformer.model.edge_encoding`)
    TASKS         `graphformer.data.tasks.Task` objects
    MODELS        `graphformer.model.base.GraphModel` classes, built from a ``ModelConfig``

The command line builds its choices, ``--help`` and checks from these entries; the modules that
run them load them by name. Adding one inside the package: its own module, and one entry here;
from outside: the same `register` call in a plugin (``docs/howto/extend.md``).
This module imports no torch.
"""

from __future__ import annotations

from graphformer.registry import Registry

BACKENDS = Registry(
    "attention backend",
    {
        "chooses": "picks another backend per call (auto)",
        "trains-only-on-cuda": "computes gradients on CUDA only (evaluation and decoding elsewhere)",
        "needs-dgl": "needs DGL installed",
        "needs-flex-attention": "needs torch's FlexAttention (torch >= 2.5)",
        "position-bias": "adds a bias derived from positions to each score (relative, t5, alibi)",
        "edge-type-bias": "adds a bias read from each edge's given type (tree roles, typed edges files)",
    },
)
# The rule of auto, written once: the help, the docs' table and graphformer.attention's docstring show it.
AUTO_RULE = (
    "padded where edges fill a quarter of the batch's tiles, flex (no gradients, on a CPU) or "
    "blocked on long relations whose blocks hold edges, else dgl where DGL is installed and runs on "
    "the device, else torch"
)
BIASED = ["position-bias", "edge-type-bias"]
BACKENDS.register("auto", AUTO_RULE, "graphformer.attention:_auto", ["chooses", *BIASED])
BACKENDS.register("dgl", "edge-wise DGL kernels", "graphformer.attention.dgl_ops:attend", ["needs-dgl", *BIASED])
BACKENDS.register(
    "torch", "the same message passing as PyTorch ops (any device)", "graphformer.attention.torch_ops:attend", BIASED
)
BACKENDS.register(
    "padded",
    "one dense matrix per sample (batches of short sentences)",
    "graphformer.attention.padded:attend",
    BIASED,
)
BACKENDS.register(
    "blocked", "block-sparse tiles (long sequences, local patterns)", "graphformer.attention.blocked:attend", BIASED
)
BACKENDS.register(
    "flex",
    "PyTorch's FlexAttention with the edges as a block mask (torch >= 2.5; trains on CUDA only)",
    "graphformer.attention.flex:attend",
    ["trains-only-on-cuda", "needs-flex-attention", "position-bias"],
    why_cpu="torch's FlexAttention has no backward pass",
)

# "encoder-only" is help text: the pool refuses span nodes outside the encoder by the pattern
# itself (graphformer.graphs.patterns.adds_span_nodes), whatever its entry says.
PATTERNS = Registry("attention pattern", {"encoder-only": "adds span nodes: --enc-attention only"})
# ``arguments``: what follows the colon, as ``train --help`` writes it; [...] is optional.
PATTERNS.register("full", "every pair", "graphformer.graphs.patterns:full", arguments="")
PATTERNS.register("causal", "key <= query", "graphformer.graphs.patterns:causal", arguments="")
PATTERNS.register("window", "|key - query| <= W", "graphformer.graphs.patterns:window", arguments="W")
PATTERNS.register("mirror", "the window reflected", "graphformer.graphs.patterns:mirror", arguments="W")
PATTERNS.register("dilated", "a strided window", "graphformer.graphs.patterns:dilated", arguments="W,D")
PATTERNS.register("global", "the first G tokens", "graphformer.graphs.patterns:global_tokens", arguments="G")
PATTERNS.register("block", "blocks of B", "graphformer.graphs.patterns:block", arguments="B")
PATTERNS.register("random", "R random keys", "graphformer.graphs.patterns:random_links", arguments="R[,SEED]")
PATTERNS.register(
    "tree", "a binary-partition tree", "graphformer.graphs.patterns:tree", ["encoder-only"], arguments="K"
)

SAMPLE_TERMS = Registry(
    "sample term",
    {
        "derived": "derived from the sample's source tokens (details: serves, fails)",
        "given": "read beside the data, {split}.{sublayer}.edges",
    },
    requires={"derived": ("serves", "fails")},  # sample_edges reads both
    one_of=("derived", "given"),
)
SAMPLE_TERMS.register(
    "parse-tree",
    "the source's parse tree (encoder only)",
    "graphformer.graphs.expression_tree:parse_tree",
    ["derived"],
    serves="enc",
    fails="does not parse as a bracketed expression",
)
SAMPLE_TERMS.register(
    "operands",
    "target position t reads position t of each operand of A + B (cross only)",
    "graphformer.graphs.sample_edges:operands",
    ["derived"],
    serves="cross",
    fails="is not two operands joined by '+'",
)
SAMPLE_TERMS.register("edges", "{split}.{sublayer}.edges", None, ["given"])

# What an edge says (graphformer.graphs.edge_types): each entry builds a derivation from its
# integer ``arguments``, as PATTERNS' builders do.
EDGE_TYPES = Registry(
    "edge type",
    {
        "positional": "derived from the query and key positions: any pattern, sample graph or union",
        "per-sample": "comes with each sample's edges (its graph, or a type column of an edges file)",
    },
    one_of=("positional", "per-sample"),
)
EDGE_TYPES.register(
    "relative",
    "query minus key position, clipped at K (2K+1 types)",
    "graphformer.graphs.edge_types:Relative",
    ["positional"],
    arguments="K",
)
EDGE_TYPES.register(
    "t5",
    "T5's log buckets of the offset: B buckets, log-spaced up to distance D",
    "graphformer.graphs.edge_types:T5Buckets",
    ["positional"],
    arguments="B,D",
)
EDGE_TYPES.register(
    "distance",
    "|query - key position| (ALiBi's)",
    "graphformer.graphs.edge_types:Distance",
    ["positional"],
    arguments="",
)

# Per-sample ones (graphformer.graphs.sample_types): the graph pool computes them for every edge of
# an etype as it batches (GraphPool(edge_types={"enc": "role"})); each is a Given.
EDGE_TYPES.register(
    "role",
    "the edge's role in the sample's tree: self, parent-child, child-parent, </s> and <cls> links, other",
    "graphformer.graphs.sample_types:role",
    ["per-sample"],
    arguments="",
)
EDGE_TYPES.register(
    "hops",
    "shortest-path length between the ends in the sample's own edges, clipped at K (K+2 types)",
    "graphformer.graphs.sample_types:hops",
    ["per-sample"],
    arguments="K",
)
EDGE_TYPES.register(
    "given",
    "T types listed with the sample's edges (a typed edges file, Python), F features each",
    "graphformer.graphs.sample_types:given",
    ["per-sample"],
    arguments="T[,F]",
)

# How attention uses an edge's type (graphformer.model.edge_encoding): each entry is a module class
# built from a derivation of EDGE_TYPES, the heads and the head width, for one attention sub-layer.
EDGE_USES = Registry(
    "edge use",
    {
        "table": "a learned row per type id: takes a type with a finite number of ids (not distance)",
        "distance": "a function of the distance itself: takes distance only",
        "features": "a learned map of each edge's F features: takes types given with features (given:T,F)",
    },
    one_of=("table", "distance", "features"),
)
EDGE_USES.register(
    "bias",
    "a learned scalar per type and head added to the score (T5, Graphormer), zero at first",
    "graphformer.model.edge_encoding:ScoreBias",
    ["table"],
)
EDGE_USES.register(
    "alibi",
    "a fixed slope per head times -distance (ALiBi; Press et al., 2022)",
    "graphformer.model.edge_encoding:AlibiSlopes",
    ["distance"],
    types="distance",
)
EDGE_USES.register(
    "shaw",
    "learned key and value vectors per type and head (Shaw et al., 2018)",
    "graphformer.model.edge_encoding:ShawVectors",
    ["table"],
)

EDGE_USES.register(
    "features",
    "learned linear maps of each edge's features added to its key and value (PyG's edge_dim)",
    "graphformer.model.edge_encoding:FeatureMaps",
    ["features"],
)

TASKS = Registry("task", {"generated": "its data is generated from the seed"})
for _name in ("copy", "sort", "reverse", "addition"):
    TASKS.register(_name, "generated", f"graphformer.data.tasks:{_name.upper()}", ["generated"])
TASKS.register("listops", "generated", "graphformer.data.tasks:LISTOPS", ["generated"])
TASKS.register("recall", "generated", "graphformer.data.tasks:RECALL", ["generated"])
TASKS.register("boolean", "generated", "graphformer.data.tasks:BOOLEAN", ["generated"])
TASKS.register("parallel", "your files in --data-dir", "graphformer.data.tasks:PARALLEL")
TASKS.register("classify", "your texts and one label per line in --data-dir", "graphformer.data.tasks:CLASSIFY")
TASKS.register("multi30k", "English-German", "graphformer.data.tasks:MULTI30K")

MODELS = Registry(
    "model",
    {
        "classifies": "one label per sample: an encoder and a head, no decoder (its pool: source graphs only)",
        "universal": "a shared layer repeated with ACT (max_depth, act_threshold, ponder_weight apply)",
    },
)
MODELS.register("transformer", "a stack of layers per side", "graphformer.model.transformer:GraphTransformer")
MODELS.register(
    "universal",
    "one shared layer per side, repeated with adaptive computation time",
    "graphformer.model.universal:UniversalTransformer",
    ["universal"],
)
MODELS.register(
    "encoder",
    "the encoder stack and a classification head, one label per sample",
    "graphformer.model.classifier:EncoderClassifier",
    ["classifies"],
)
MODELS.register(
    "universal-encoder",
    "the same classifier on the universal encoder",
    "graphformer.model.classifier:UniversalEncoderClassifier",
    ["classifies", "universal"],
)

REGISTRIES = {
    "backend": BACKENDS,
    "pattern": PATTERNS,
    "sample-term": SAMPLE_TERMS,
    "edge-type": EDGE_TYPES,
    "edge-use": EDGE_USES,
    "task": TASKS,
    "model": MODELS,
}


def table(registry: Registry) -> str:
    """A Markdown table of ``registry``'s entries (name, summary, capabilities), as the docs show it."""
    rows = ["| name | what | capabilities |", "| --- | --- | --- |"]
    for entry in registry.entries():
        shown = entry.name + (f":{entry.details['arguments']}" if entry.details.get("arguments") else "")
        rows.append(f"| `{shown}` | {entry.summary} | {', '.join(sorted(entry.capabilities))} |")
    return "\n".join(rows)
