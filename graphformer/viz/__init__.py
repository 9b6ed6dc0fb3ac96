"""Visualisation: attention maps as dense arrays (`maps`), their pictures (`plots`: heatmaps,
head grids, animations, ponder plots; `bipartite`: a map as a graph), the HTML animation player
(`player`), and the maps recorded during training (`recording`)."""

from graphformer.viz.maps import SUBLAYERS, attention_maps

__all__ = ["attention_maps", "SUBLAYERS"]
