"""Visualisation: attention maps as dense arrays (`maps`) or kept as edges (`edge_maps`), what
they compose to through the layers (`attention_rollout`, `attention_flow`), a universal model's
maps per ACT step (`step_maps`), their pictures (`plots`: heatmaps, head grids, animations,
ponder plots; `bipartite`: a map as a graph; `step_views`: halted tokens marked; `binned`: long
maps in blocks of tokens), the HTML
animation player (`player`), the maps recorded during training (`recording`), and attention on
any input from a trained run (`on_demand` computes it; `attend_views` draws it, `attend_page` as
an HTML page): ``graphformer.viz.attend(run_dir, ["a b c"], out="runs/x.png")``."""

from graphformer.viz.attention_flow import flow
from graphformer.viz.attention_rollout import rollout
from graphformer.viz.edge_maps import EdgeMaps, edge_maps
from graphformer.viz.maps import SUBLAYERS, attention_maps
from graphformer.viz.step_maps import StepMaps, step_maps


def __getattr__(name):
    """``attend`` loads on first use: it draws with matplotlib, which the maps alone do not need."""
    if name == "attend":
        from graphformer.viz.attend_views import attend

        return attend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["attention_maps", "attend", "edge_maps", "EdgeMaps", "flow", "rollout", "step_maps", "StepMaps", "SUBLAYERS"]
