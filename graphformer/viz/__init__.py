"""Visualisation: attention maps as dense arrays (`maps`) or kept as edges (`edge_maps`), what
they compose to through the layers (`attention_rollout`, `attention_flow`), a universal model's
maps per ACT step (`step_maps`), their pictures (`plots`: heatmaps, head grids, animations,
ponder plots; `bipartite`: a map as a graph; `step_views`: halted tokens marked; `binned`: long
maps in blocks of tokens), the HTML
animation player (`player`), the maps recorded during training (`recording`), and attention on
any input from a trained run (`on_demand` computes it; `attend_views` draws it, `attend_page` as
an HTML page): ``graphformer.viz.attend(run_dir, ["a b c"], out="runs/x.png")``; rollout and flow
on any input, for Transformers and universal models alike (`rolled` computes, `rollout_views`
draws): ``graphformer.viz.draw_rollout(run_dir, ["a b c"], out="runs/r.png", show="rollout")``."""

from graphformer.viz.attention_flow import flow
from graphformer.viz.attention_rollout import rollout
from graphformer.viz.edge_maps import EdgeMaps, edge_maps
from graphformer.viz.maps import SUBLAYERS, attention_maps
from graphformer.viz.step_maps import StepMaps, step_maps


def __getattr__(name):
    """``attend`` and ``draw_rollout`` load on first use: they draw with matplotlib, which the maps
    alone do not need."""
    if name == "attend":
        from graphformer.viz.attend_views import attend

        return attend
    if name == "draw_rollout":
        from graphformer.viz.rollout_views import draw_rollout

        return draw_rollout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "attention_maps",
    "attend",
    "draw_rollout",
    "edge_maps",
    "EdgeMaps",
    "flow",
    "rollout",
    "step_maps",
    "StepMaps",
    "SUBLAYERS",
]
