"""The model that a config names: its class is the entry of ``cfg.model`` in `graphformer.catalog.MODELS`.

Nothing in `graphformer.model` imports this module: the classes are found by name, so adding a
kind of model is its own module and one catalog entry.
"""

from graphformer.catalog import MODELS
from graphformer.choices import DEFAULT_BACKEND
from graphformer.model.config import ModelConfig, unused_layers
from graphformer.vocab import SPECIALS


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
    """The model that ``cfg.model`` names: the factory (`make_model` builds ``cfg`` from keywords first)."""
    if cfg.tgt_vocab <= len(SPECIALS):
        what = "label" if cfg.classifies else "token"
        raise ValueError(
            f"tgt_vocab ({cfg.tgt_vocab}) holds no {what} besides the {len(SPECIALS)} specials "
            f"{SPECIALS}: the model could only answer those"
        )
    cls = MODELS[cfg.model]
    if getattr(cls, "kind", None) != cfg.model:
        raise ValueError(f"model {cfg.model!r} is registered with {cls!r}, whose kind is not {cfg.model!r}")
    return cls(cfg, attention_backend)


def make_model(src_vocab: int, tgt_vocab: int | None = None, attention_backend: str = DEFAULT_BACKEND, **hyper):
    """Build a `GraphTransformer` (or, with ``model="universal"``, a `UniversalTransformer`, with
    ``model="encoder"`` an `EncoderClassifier` over ``tgt_vocab`` labels, with ``"universal-encoder"``
    a `UniversalEncoderClassifier`, or a plugin's kind); ``hyper`` are `ModelConfig` fields. ``layers``
    sets the depth of the layer stacks; the universal models have one shared layer and take
    ``max_depth`` instead (giving them ``layers`` is an error)."""
    # A config always holds a layers value (its default), so only a caller's explicit one is refused; the
    # command line warns instead, since a --config file may be shared by several kinds of model.
    if "layers" in hyper and (why := unused_layers(hyper.get("model", "transformer"))):
        raise ValueError(f"{why}; leave layers out (set max_depth for the most steps)")
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=src_vocab if tgt_vocab is None else tgt_vocab, **hyper)
    return build_model(cfg, attention_backend)
