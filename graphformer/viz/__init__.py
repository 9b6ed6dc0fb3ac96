"""Visualisation: attention maps as dense arrays, heatmaps, animations, ponder plots."""

from graphformer.viz.maps import RELATIONS, attention_maps

__all__ = ["attention_maps", "RELATIONS"]
