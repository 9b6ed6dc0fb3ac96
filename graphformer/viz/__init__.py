"""Visualisation: attention maps as dense arrays (`maps`) or kept as edges (`edge_maps`), what
they compose to through the layers (`attention_rollout`, `attention_flow`), their pictures (`plots`: heatmaps, head
grids, animations, ponder plots; `bipartite`: a map as a graph), the HTML animation player
(`player`), and the maps recorded during training (`recording`)."""

from graphformer.viz.attention_flow import flow
from graphformer.viz.attention_rollout import rollout
from graphformer.viz.edge_maps import EdgeMaps, edge_maps
from graphformer.viz.maps import SUBLAYERS, attention_maps

__all__ = ["attention_maps", "edge_maps", "EdgeMaps", "flow", "rollout", "SUBLAYERS"]
