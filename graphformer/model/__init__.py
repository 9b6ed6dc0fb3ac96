"""Layers and models: embeddings, multi-head attention, encoder/decoder layers, the protocol every
model follows (`graphformer.model.base`), the Transformer, the Adaptive Universal Transformer, the
encoder-only classifiers, and the factory that picks one from a config.

``ModelConfig`` is imported eagerly (the command line reads its fields without torch); the
models load torch and DGL on first use.
"""

from importlib import import_module

from graphformer.model.config import ModelConfig

_WHERE = {
    "GraphTransformer": "graphformer.model.transformer",
    "UniversalTransformer": "graphformer.model.universal",
    "EncoderClassifier": "graphformer.model.classifier",
    "UniversalEncoderClassifier": "graphformer.model.classifier",
    "GraphModel": "graphformer.model.base",
    "SequenceModel": "graphformer.model.base",
    "ModelOutput": "graphformer.model.output",
    "build_model": "graphformer.model.factory",
    "make_model": "graphformer.model.factory",
    "evaluating": "graphformer.model.modes",
}


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ModelConfig", *_WHERE]
