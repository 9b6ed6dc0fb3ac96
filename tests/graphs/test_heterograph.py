"""graphformer where DGL cannot be imported: everything but the ``dgl`` backend works.

On the current stack DGL is absent; on the reference stack ``sys.modules['dgl'] = None`` makes
``import dgl`` fail the same way, so both stacks run these.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import TINY_MODEL, import_dgl, refused_training, small_copy_data

from graphformer import GraphPool, make_model
from graphformer.graphs import ENC, heterograph, make_batch

# Train two steps from the command line, beam-decode and draw an attention map, with DGL blocked.
WITHOUT_DGL = textwrap.dedent("""
    import sys
    sys.modules["dgl"] = None
    from pathlib import Path
    import torch
    from graphformer.cli import main
    from graphformer.decoding import translate_ids
    from graphformer.graphs import make_batch
    from graphformer.running.loaded import LoadedRun
    from graphformer.viz import attention_maps

    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    assert main(["train", "--task", "copy", "--data-dir", str(data), "--out", str(out), "--max-steps", "2",
                 *sys.argv[3:]]) == 0
    run = LoadedRun(out, "last", "cpu")
    hyps = translate_ids(run.model, [[5, 6, 7], [8, 9]], beam=3, extra_len=3)
    assert len(hyps) == 2 and all(h.tokens for h in hyps)
    maps = attention_maps(run.model, make_batch(run.model.make_pool(), [[5, 6, 7]], [[5, 6]]), "cross")
    weights = maps.nan_to_num(0).sum(-1)
    assert torch.allclose(weights, torch.ones_like(weights), atol=1e-5), weights
    assert sys.modules["dgl"] is None
    print("ok", run.model.attention_backend)
""")


def test_training_beam_decoding_and_maps_run_with_dgl_unimportable(tmp_path):
    data = small_copy_data(tmp_path / "data", n_train=40)
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_DGL, str(data), str(tmp_path / "run"), *TINY_MODEL],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok auto"


def test_asking_for_the_dgl_backend_without_dgl_is_one_line_naming_what_to_do(tmp_path):
    line = refused_training(tmp_path, "dgl", prelude="sys.modules['dgl'] = None")
    for named in ("--attention-backend", "needs DGL", "torch <= 2.2.1", "make install", "auto", "torch"):
        assert named in line


def test_auto_never_picks_dgl_where_it_cannot_be_imported():
    probe = textwrap.dedent("""
        import sys; sys.modules["dgl"] = None
        import torch
        from graphformer.attention import dgl_ops, graph_attention, unavailable
        from graphformer.graphs import patterns
        from graphformer.graphs.relation import Relation
        assert unavailable("dgl") and not unavailable("torch") and not dgl_ops.runs_on(torch.device("cpu"))
        u, v = patterns.parse("random:3")(40, 40)
        relation = Relation.of_edges(u, v, 40, 40)
        q = torch.randn(40, 2, 4)
        out, w = graph_attention(relation, q, q, q, return_weights=True)
        sums = torch.zeros(40, 2, 1).index_add_(0, relation.v, w)
        assert torch.allclose(sums, torch.ones_like(sums))
        try:
            graph_attention(relation, q, q, q, backend="dgl")
        except ValueError as err:
            assert "needs DGL" in str(err), err
        else:
            raise AssertionError("the dgl backend ran without DGL")
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_batch_graph_is_what_dgl_batch_makes_of_the_samples_graphs():
    """The pool's own graphs and batching against DGL's heterographs and ``dgl.batch``."""
    dgl = import_dgl()
    pool = GraphPool("tree:1", "causal-window:2", "window:2")
    lengths = [(5, 3), (2, 4), (7, 1)]
    mine = pool.batch(lengths)
    theirs = dgl.batch([pool.graph(n, m).to_dgl() for n, m in lengths])
    assert sorted(mine.canonical_etypes) == sorted(theirs.canonical_etypes)
    for etype in mine.canonical_etypes:
        assert all(a.equal(b) for a, b in zip(mine.edges(etype), theirs.edges(etype=etype)))
    for ntype in ("src", "tgt"):
        assert mine.num_nodes(ntype) == theirs.num_nodes(ntype)
        assert mine.pos[ntype].equal(theirs.nodes[ntype].data["pos"])
    batch = make_batch(pool, [[4] * 4, [5], [6] * 6], [[7] * 2, [8] * 3, []])
    assert batch.dgl_graph().num_edges(ENC) == batch.graph.num_edges(ENC)


def test_batching_offsets_every_relation_by_its_own_node_types():
    graphs = [
        heterograph.HeteroGraph(
            {"a": 2, "b": 3},
            {("a", "x", "b"): (torch.tensor([0, 1]), torch.tensor([2, 0]))},
            {"a": torch.arange(2), "b": torch.arange(3)},
        ),
        heterograph.HeteroGraph(
            {"a": 1, "b": 1},
            {("a", "x", "b"): (torch.tensor([0]), torch.tensor([0]))},
            {"a": torch.arange(1), "b": torch.arange(1)},
        ),
    ]
    joined = heterograph.batch(graphs)
    assert joined.edges("x")[0].tolist() == [0, 1, 2] and joined.edges("x")[1].tolist() == [2, 0, 3]
    assert joined.num_nodes("a") == 3 and joined.in_degrees("x").tolist() == [1, 0, 1, 1]
    assert joined.pos["b"].tolist() == [0, 1, 2, 0]
    nx_graph = joined.to_networkx("x")
    assert sorted(nx_graph.edges) == [(0, 2), (1, 0), (2, 3)]
    with pytest.raises(KeyError, match="no etype y"):
        joined.edges("y")


def test_a_pool_with_dgl_blocked_builds_the_graphs_a_pool_with_dgl_builds():
    """One structure on both stacks: the graphs do not depend on whether DGL imports."""
    probe = (
        "import sys; sys.modules['dgl'] = None\nimport torch\nfrom graphformer import GraphPool\n"
        "g = GraphPool('window:2+global:1').batch([(4, 2), (3, 3)])\n"
        "print([torch.cat(g.edges(e)).tolist() for e in g.canonical_etypes])"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    here = GraphPool("window:2+global:1").batch([(4, 2), (3, 3)])
    assert proc.stdout.strip() == str([torch.cat(here.edges(e)).tolist() for e in here.canonical_etypes])
    model = make_model(20, layers=1, d_model=8, heads=2, d_ff=8)
    assert model.make_pool().graph(3, 2).num_edges() == 9 + 3 + 6
