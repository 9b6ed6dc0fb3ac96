"""Layers and models: embeddings, multi-head attention, encoder/decoder layers, the Transformer
and the Adaptive Universal Transformer."""
from graphformer.model.transformer import GraphTransformer, ModelConfig, build_model, make_model

__all__ = ["GraphTransformer", "ModelConfig", "build_model", "make_model"]
