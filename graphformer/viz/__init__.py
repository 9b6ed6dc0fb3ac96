"""Visualisation: attention maps as dense arrays (`maps`) or kept as edges (`edge_maps`), what
they compose to through the layers (`rollout`, `flow`), their pictures (`plots`: heatmaps, head
grids, animations, ponder plots; `bipartite`: a map as a graph), the HTML animation player
(`player`), and the maps recorded during training (`recording`)."""

from graphformer.viz.edge_maps import EdgeMaps, edge_maps
from graphformer.viz.maps import SUBLAYERS, attention_maps

__all__ = ["attention_maps", "edge_maps", "EdgeMaps", "SUBLAYERS"]
