"""Visualisation: attention maps as dense arrays (`maps`) or kept as edges (`edge_maps`), what
they compose to through the layers (`rollout`, `flow`), their pictures (`plots`: heatmaps, head
grids, animations, ponder plots; `bipartite`: a map as a graph), the HTML animation player
(`player`), and the maps recorded during training (`recording`).

``graphformer.viz.rollout`` and ``graphformer.viz.flow`` are the functions of the same names;
their modules are imported as ``from graphformer.viz.rollout import ...``."""

from graphformer.viz.edge_maps import EdgeMaps, edge_maps
from graphformer.viz.flow import flow
from graphformer.viz.maps import SUBLAYERS, attention_maps
from graphformer.viz.rollout import rollout

__all__ = ["attention_maps", "edge_maps", "EdgeMaps", "flow", "rollout", "SUBLAYERS"]
