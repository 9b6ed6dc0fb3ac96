"""What a `Relation` computes, against brute-force references on random graphs: in-degrees and key
rows, per-sample key and query counts, dense groups, restriction to some destinations, and the
node positions that rows and groups are given."""

import pytest
import torch

from graphformer.graphs.edge_types import offsets
from graphformer.graphs.relation import Relation, sample_of


def random_relation(seed: int, samples: int = 3) -> tuple[Relation, list[tuple[int, int]], list[int], list[int]]:
    """A batch-like relation: samples numbered one after another, edges within samples only,
    every query with at least one key; and its edge set, key and query counts."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randint(1, 6, (samples,), generator=gen).tolist()
    queries = torch.randint(1, 6, (samples,), generator=gen).tolist()
    edges, key_first, query_first = set(), 0, 0
    for nk, nq in zip(keys, queries):
        for q in range(nq):
            linked = (torch.rand(nk, generator=gen) < 0.5).nonzero().squeeze(1).tolist() or [q % nk]
            edges |= {(key_first + k, query_first + q) for k in linked}
        key_first, query_first = key_first + nk, query_first + nq
    ordered = sorted(edges, key=lambda e: (e[1], e[0]))
    u = torch.tensor([e[0] for e in ordered])
    v = torch.tensor([e[1] for e in ordered])
    relation = Relation.of_edges(u, v, sum(keys), sum(queries), torch.tensor(keys), torch.tensor(queries))
    return relation, ordered, keys, queries


def edge_set(relation: Relation) -> set[tuple[int, int]]:
    return set(zip(relation.u.tolist(), relation.v.tolist()))


@pytest.mark.parametrize("seed", range(5))
def test_in_degrees_match_a_count_of_the_edges(seed):
    relation, edges, _, queries = random_relation(seed)
    expected = [sum(1 for _, q in edges if q == j) for j in range(sum(queries))]
    assert torch.bincount(relation.v, minlength=relation.num_queries).tolist() == expected
    assert relation.num_edges == len(edges)


@pytest.mark.parametrize("seed", range(5))
def test_sample_counts_say_which_sample_each_node_is_in(seed):
    relation, edges, keys, queries = random_relation(seed)
    key_sample, query_sample = sample_of(relation.key_counts), sample_of(relation.query_counts)
    assert key_sample.tolist() == [b for b, n in enumerate(keys) for _ in range(n)]
    assert query_sample.tolist() == [b for b, n in enumerate(queries) for _ in range(n)]
    assert all(key_sample[k] == query_sample[q] for k, q in edges)  # no edge joins two samples


@pytest.mark.parametrize("seed", range(5))
def test_restriction_to_destinations_keeps_their_in_edges_renumbered(seed):
    relation, edges, _, queries = random_relation(seed)
    active = torch.rand(relation.num_queries, generator=torch.Generator().manual_seed(100 + seed)) < 0.6
    new_id = {old: new for new, old in enumerate(active.nonzero().squeeze(1).tolist())}
    restricted = relation.restrict_to_destinations(active)
    assert edge_set(restricted) == {(k, new_id[q]) for k, q in edges if q in new_id}
    assert restricted.num_queries == len(new_id) and restricted.num_keys == relation.num_keys
    sample = [b for b, n in enumerate(queries) for _ in range(n)]
    assert restricted.query_counts.tolist() == [sum(1 for q in new_id if sample[q] == b) for b in range(len(queries))]
    assert restricted.key_counts.tolist() == relation.key_counts.tolist()


def test_key_rows_list_each_querys_keys():
    rows = torch.tensor([[0, 2, -1], [1, -1, -1], [0, 1, 2]])
    relation = Relation.of_rows(rows, num_keys=3)
    assert edge_set(relation) == {(0, 0), (2, 0), (1, 1), (0, 2), (1, 2), (2, 2)}
    assert relation.key_rows.tolist() == rows.tolist()
    restricted = relation.restrict_to_destinations(torch.tensor([True, False, True]))
    assert restricted.key_rows.tolist() == [[0, 2, -1], [0, 1, 2]]
    assert edge_set(restricted) == {(0, 0), (2, 0), (0, 1), (1, 1), (2, 1)}


@pytest.mark.parametrize("lengths", [3, [3, 1, 2]])
def test_a_grouped_relation_has_the_edges_of_its_groups(lengths):
    groups, queries, width = 3, 2, 4
    relation = Relation.of_groups(groups, queries, width, lengths)
    per_group = [lengths] * groups if isinstance(lengths, int) else lengths
    expected = {
        (b * width + j, b * queries + i) for b in range(groups) for i in range(queries) for j in range(per_group[b])
    }
    assert relation.num_edges == len(expected)
    assert relation.num_keys == groups * width and relation.num_queries == groups * queries
    assert edge_set(relation) == expected
    assert torch.bincount(relation.v).tolist() == [per_group[q // queries] for q in range(groups * queries)]


def test_queries_moved_to_other_positions_share_the_edges_and_their_layouts():
    """Incremental decoding's cross relation: built once, its queries at a new position each step."""
    grouped = Relation.of_groups(2, 1, 4, [3, 2], key_positions=torch.arange(4).repeat(2))
    first = grouped.with_query_positions(torch.tensor([2, 2]))
    u = first.u  # a grouped relation's edges are made on first use, as a layout
    later = grouped.with_query_positions(torch.tensor([5, 5]))
    assert later.u is u and later.layouts is grouped.layouts
    assert grouped.query_positions is None and first.query_positions.tolist() == [2, 2]
    assert list(zip(later.u.tolist(), later.v.tolist())) == [(0, 0), (1, 0), (2, 0), (4, 1), (5, 1)]
    assert offsets(later, later.v, later.u).tolist() == [5, 4, 3, 5, 4]
    assert offsets(first, first.v, first.u).tolist() == [2, 1, 0, 2, 1]


def test_rows_carry_the_positions_they_are_given():
    rows = Relation.of_rows(
        torch.tensor([[1, 3], [0, -1]]),
        4,
        key_positions=torch.tensor([7, 8, 9, 10]),
        query_positions=torch.tensor([10, 9]),
    )
    assert offsets(rows, rows.v, rows.u).tolist() == [2, 0, 2]
