"""Layers and models: embeddings, multi-head attention, encoder/decoder layers, the Transformer
and the Adaptive Universal Transformer.

``ModelConfig`` is imported eagerly (the command line reads its fields without torch); the
models load torch and DGL on first use.
"""
from importlib import import_module

from graphformer.model.config import ModelConfig

_LAZY = {"GraphTransformer": "graphformer.model.transformer", "build_model": "graphformer.model.transformer",
         "make_model": "graphformer.model.transformer"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GraphTransformer", "ModelConfig", "build_model", "make_model"]
