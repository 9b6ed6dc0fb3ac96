"""Graph pool and batch structure."""

import pytest
import torch

from graphformer import GraphPool
from graphformer.graphs import CROSS, DEC, ENC, SRC, TGT, make_batch
from graphformer.vocab import EOS, SOS


@pytest.mark.parametrize("n,m", [(1, 1), (1, 7), (5, 1), (9, 4), (40, 40)])
def test_edge_counts(n, m):
    g = GraphPool().graph(n, m)
    assert g.num_nodes(SRC) == n and g.num_nodes(TGT) == m
    assert g.num_edges(ENC) == n * n
    assert g.num_edges(DEC) == m * (m + 1) // 2
    assert g.num_edges(CROSS) == n * m


def test_self_loops_and_completeness():
    g = GraphPool().graph(6, 5)
    u, v = g.edges(etype=ENC)
    assert set(zip(u.tolist(), v.tolist())) == {(i, j) for i in range(6) for j in range(6)}
    u, v = g.edges(etype=CROSS)
    assert set(zip(u.tolist(), v.tolist())) == {(i, j) for i in range(6) for j in range(5)}


def test_decoder_edges_are_causal_in_a_batch():
    pool = GraphPool()
    batch = make_batch(pool, [[5] * 3, [6] * 7, [7]], [[8] * 9, [], [9] * 4])
    u, v = batch.graph.edges(etype=DEC)
    pos = batch.tgt_pos
    sample = torch.repeat_interleave(torch.arange(3), batch.tgt_lengths)
    assert bool((pos[u] <= pos[v]).all()), "an edge from a later target token"
    assert bool((sample[u] == sample[v]).all()), "an edge between samples"
    # every target node receives exactly the source nodes of its own sample
    cu, cv = batch.graph.edges(etype=CROSS)
    src_sample = torch.repeat_interleave(torch.arange(3), batch.src_lengths)
    assert bool((src_sample[cu] == sample[cv]).all())
    in_deg = torch.bincount(cv, minlength=batch.num_tgt_tokens)
    assert in_deg.tolist() == batch.src_lengths[sample].tolist()


def test_batch_carries_tokens_positions_and_gold():
    batch = make_batch(GraphPool(), [[4, 5], [6]], [[7, 8, 9], [10]])
    assert batch.size == 2
    assert batch.src_tokens.tolist() == [4, 5, EOS, 6, EOS]
    assert batch.src_pos.tolist() == [0, 1, 2, 0, 1]
    assert batch.tgt_tokens.tolist() == [SOS, 7, 8, 9, SOS, 10]
    assert batch.gold.tolist() == [7, 8, 9, EOS, 10, EOS]
    assert batch.tgt_pos.tolist() == [0, 1, 2, 3, 0, 1]
    assert batch.num_tgt_tokens == 6


def test_graphs_are_built_lazily_and_cached():
    pool = GraphPool()
    assert len(pool.graph) == 0
    g1 = pool.graph(3, 4)
    assert pool.graph(3, 4) is g1
    assert len(pool.graph) == 1


def test_the_graph_cache_keeps_the_most_recently_used_graphs_within_its_edge_budget():
    """Full attention, no targets: n tokens give n * n edges."""
    pool = GraphPool(cache_edges=100)
    first = pool.graph(5, 0)  # 25 edges
    pool.graph(6, 0)  # 36: 61 in all
    assert pool.graph(5, 0) is first  # used again: now the most recent
    pool.graph(7, 0)  # 49: 110 > 100, the least recently used (6) goes
    assert list(pool.graph.graphs) == [(5, 0), (7, 0)] and pool.graph.edges == 74
    assert pool.graph(5, 0) is first
    big = pool.graph(11, 0)  # 121 edges alone exceed the budget: only the newest stays
    assert list(pool.graph.graphs) == [(11, 0)] and pool.graph(11, 0) is big


def test_inference_batch_has_no_target_nodes():
    batch = make_batch(GraphPool(), [[4, 5, 6]])
    assert batch.gold is None and batch.num_tgt_tokens == 0
    assert batch.graph.num_edges(ENC) == 16  # 3 tokens and </s>


def test_empty_source_is_rejected():
    with pytest.raises(ValueError, match="empty source"):
        make_batch(GraphPool(), [[4], []], [[5], [6]])


def test_a_batch_numbers_its_samples_one_after_another():
    pool = GraphPool("window:1")
    src, tgt = [[4, 5, 6], [7], [8, 9]], [[4], [5, 6], [7]]
    batch = make_batch(pool, src, tgt)
    assert batch.src_nodes.tolist() == [4, 2, 3]  # tokens and </s>
    assert batch.src_offsets.tolist() == [0, 4, 6]
    assert batch.graph.num_nodes(SRC) == 9 and batch.graph.num_nodes(TGT) == 2 + 3 + 2
    u, v = batch.graph.edges(ENC)
    sample = torch.repeat_interleave(torch.arange(3), batch.src_nodes)
    assert bool((sample[u] == sample[v]).all())
    for b, first in enumerate(batch.src_offsets.tolist()):  # each sample's graph, shifted by its offset
        alone = pool.graph(len(src[b]) + 1, len(tgt[b]) + 1)
        au, av = alone.edges(ENC)
        mine = sample[v] == b
        assert set(zip((u[mine] - first).tolist(), (v[mine] - first).tolist())) == set(zip(au.tolist(), av.tolist()))


def test_a_batch_is_built_from_the_graphs_cached_by_length():
    pool = GraphPool()
    make_batch(pool, [[4, 5], [6, 7], [8]], [[4], [5], [6, 7]])
    assert sorted(pool.graph.graphs) == [(2, 3), (3, 2)]  # two samples of one length pair share a graph
    first = pool.graph(3, 2)
    make_batch(pool, [[9, 10]], [[11]])
    assert pool.graph(3, 2) is first and len(pool.graph) == 2


def test_moving_a_batch_moves_its_tensors_and_relations():
    batch = make_batch(GraphPool(), [[4, 5], [6]], [[7], [8, 9]])
    relation = batch.relation(CROSS)
    moved = batch.to("meta")
    assert moved.src_tokens.device.type == "meta" and moved.src_nodes.device.type == "meta"
    assert moved.gold.device.type == "meta" and moved.device.type == "meta"
    assert moved.relation(CROSS).u.device.type == "meta" and moved.relation(CROSS) is not relation
    assert batch.src_tokens.device.type == "cpu" and batch.relation(CROSS) is relation  # the original stays
