"""Layers and models: embeddings, multi-head attention, encoder/decoder layers, the Transformer
and the Adaptive Universal Transformer, and the factory that picks one from a config."""
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.model.config import ModelConfig
from graphformer.model.output import ModelOutput
from graphformer.model.transformer import GraphTransformer
from graphformer.model.universal import UniversalTransformer

MODEL_CLASSES = {"transformer": GraphTransformer, "universal": UniversalTransformer}


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND) -> nn.Module:
    """The model that ``cfg.model`` names."""
    return MODEL_CLASSES[cfg.model](cfg, attention_backend)


def make_model(src_vocab: int, tgt_vocab: int | None = None, attention_backend: str = DEFAULT_BACKEND,
               **hyper) -> nn.Module:
    """Build a :class:`GraphTransformer` (or, with ``model="universal"``, a
    :class:`UniversalTransformer`); ``hyper`` are :class:`ModelConfig` fields."""
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=tgt_vocab or src_vocab, **hyper)
    return build_model(cfg, attention_backend)


__all__ = ["GraphTransformer", "UniversalTransformer", "ModelConfig", "ModelOutput", "build_model", "make_model"]
