"""The model that a config names: one place that knows every model class."""

from graphformer.attention import DEFAULT_BACKEND
from graphformer.graphs import GraphPool
from graphformer.model.base import GraphModel
from graphformer.model.classifier import EncoderClassifier, UniversalEncoderClassifier
from graphformer.model.config import ModelConfig, unused_layers
from graphformer.model.transformer import GraphTransformer
from graphformer.model.universal import UniversalTransformer
from graphformer.vocab import SPECIALS

# Each kind of ModelConfig.model and the class that builds it (the class declares its kind).
MODEL_CLASSES: dict[str, type[GraphModel]] = {
    cls.kind: cls for cls in (GraphTransformer, UniversalTransformer, EncoderClassifier, UniversalEncoderClassifier)
}


def graph_pool(cfg: ModelConfig) -> GraphPool:
    """The `GraphPool` whose batches the model ``cfg`` names reads (a classifier's: source graphs
    only), without building the model."""
    return MODEL_CLASSES[cfg.model].pool_of(cfg)


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND) -> GraphModel:
    """The model that ``cfg.model`` names."""
    if cfg.tgt_vocab <= len(SPECIALS):
        what = "label" if cfg.classifies else "token"
        raise ValueError(
            f"tgt_vocab ({cfg.tgt_vocab}) holds no {what} besides the {len(SPECIALS)} specials "
            f"{SPECIALS}: the model could only answer those"
        )
    return MODEL_CLASSES[cfg.model](cfg, attention_backend)


def make_model(
    src_vocab: int, tgt_vocab: int | None = None, attention_backend: str = DEFAULT_BACKEND, **hyper
) -> GraphModel:
    """Build a `GraphTransformer` (or, with ``model="universal"``, a `UniversalTransformer`, with
    ``model="encoder"`` an `EncoderClassifier` over ``tgt_vocab`` labels, with ``"universal-encoder"``
    a `UniversalEncoderClassifier`); ``hyper`` are `ModelConfig` fields. ``layers`` sets the depth of
    the layer stacks; the universal models have one shared layer and take ``max_depth`` instead
    (giving them ``layers`` is an error)."""
    # A config always holds a layers value (its default), so only a caller's explicit one is refused; the
    # command line warns instead, since a --config file may be shared by several kinds of model.
    if "layers" in hyper and (why := unused_layers(hyper.get("model", "transformer"))):
        raise ValueError(f"{why}; leave layers out (set max_depth for the most steps)")
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=src_vocab if tgt_vocab is None else tgt_vocab, **hyper)
    return build_model(cfg, attention_backend)
