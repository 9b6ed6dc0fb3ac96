"""The model that a config names: one place that knows every model class."""

from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.model.classifier import EncoderClassifier
from graphformer.model.config import ModelConfig, unused_layers
from graphformer.model.transformer import GraphTransformer
from graphformer.model.universal import UniversalTransformer
from graphformer.vocab import SPECIALS

MODEL_CLASSES = {
    "transformer": GraphTransformer,
    "universal": UniversalTransformer,
    "encoder": EncoderClassifier,
    "universal-encoder": EncoderClassifier,
}


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND) -> nn.Module:
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
) -> nn.Module:
    """Build a `GraphTransformer` (or, with ``model="universal"``, a `UniversalTransformer`, with
    ``model="encoder"`` or ``"universal-encoder"`` an `EncoderClassifier` over ``tgt_vocab`` labels); ``hyper`` are
    `ModelConfig` fields. ``layers`` sets the depth of the layer stacks; the universal models have one shared layer
    and take ``max_depth`` instead (giving them ``layers`` is an error)."""
    # A config always holds a layers value (its default), so only a caller's explicit one is refused; the
    # command line warns instead, since a --config file may be shared by several kinds of model.
    if "layers" in hyper and (why := unused_layers(hyper.get("model", "transformer"))):
        raise ValueError(f"{why}; leave layers out (set max_depth for the most steps)")
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=src_vocab if tgt_vocab is None else tgt_vocab, **hyper)
    return build_model(cfg, attention_backend)
