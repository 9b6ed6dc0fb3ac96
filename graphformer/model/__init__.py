"""Layers and models: embeddings, multi-head attention, encoder/decoder layers, the Transformer."""
from graphformer.model.transformer import GraphTransformer, ModelConfig, make_model

__all__ = ["GraphTransformer", "ModelConfig", "make_model"]
