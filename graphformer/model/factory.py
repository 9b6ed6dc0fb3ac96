"""The model that a config names: one place that knows every model class."""
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.model.classifier import EncoderClassifier
from graphformer.model.config import UNIVERSALS, ModelConfig
from graphformer.model.transformer import GraphTransformer
from graphformer.model.universal import UniversalTransformer
from graphformer.vocab import SPECIALS

MODEL_CLASSES = {"transformer": GraphTransformer, "universal": UniversalTransformer, "encoder": EncoderClassifier,
                 "universal-encoder": EncoderClassifier}


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND) -> nn.Module:
    """The model that ``cfg.model`` names."""
    if cfg.tgt_vocab <= len(SPECIALS):
        what = "label" if cfg.classifies else "token"
        raise ValueError(f"tgt_vocab ({cfg.tgt_vocab}) holds no {what} besides the {len(SPECIALS)} specials "
                         f"{SPECIALS}: the model could only answer those")
    return MODEL_CLASSES[cfg.model](cfg, attention_backend)


def make_model(src_vocab: int, tgt_vocab: int | None = None, attention_backend: str = DEFAULT_BACKEND,
               **hyper) -> nn.Module:
    """Build a `GraphTransformer` (or, with ``model="universal"``, a `UniversalTransformer`, with
    ``model="encoder"`` or ``"universal-encoder"`` an `EncoderClassifier` over ``tgt_vocab`` labels); ``hyper`` are
    `ModelConfig` fields. ``layers`` sets the depth of the layer stacks; the universal models have one shared layer
    and take ``max_depth`` instead (giving them ``layers`` is an error)."""
    if hyper.get("model") in UNIVERSALS and "layers" in hyper:  # the command line warns instead (see cli.py)
        raise ValueError(f"layers does not apply to model {hyper['model']!r}, which repeats one shared layer up to "
                         "max_depth times; leave layers out (set max_depth for the most steps)")
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=src_vocab if tgt_vocab is None else tgt_vocab, **hyper)
    return build_model(cfg, attention_backend)
