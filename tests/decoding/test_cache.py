"""The decoding cache keeps each hypothesis's keys and values where the stepper's relations read
them, follows search's reorders and drops, and the models give it and the stepper one protocol."""

import pytest
import torch

from graphformer import make_model
from graphformer.decoding import DecodingCache, IncrementalStepper
from graphformer.graphs import make_batch

ROWS, STEPS, HEADS, D_HEAD = 3, 4, 2, 5


def cache_with_steps(depth: int, steps: int) -> DecodingCache:
    """A cache whose row h holds, at step t and depth d, keys (h, t, d) and values -(h, t, d) (encoded
    as 100 h + 10 t + d), written through ``write`` at every depth."""
    cache = DecodingCache(depth, ROWS, STEPS, HEADS, D_HEAD, like=torch.zeros((), dtype=torch.float64))
    for t in range(steps):
        for d in range(depth):
            k = (100 * torch.arange(ROWS, dtype=torch.float64) + 10 * t + d)[:, None, None].expand(-1, HEADS, D_HEAD)
            cache.write(d, k, -k)
        cache.end_step()
    return cache


def test_write_returns_tables_with_row_h_step_t_at_node_h_times_max_steps_plus_t():
    cache = cache_with_steps(depth=2, steps=1)
    k = torch.full((ROWS, HEADS, D_HEAD), 7.0, dtype=torch.float64)
    keys, values = cache.write(1, k, -k)
    assert keys.shape == values.shape == (ROWS * STEPS, HEADS, D_HEAD)
    for h in range(ROWS):
        assert keys[h * STEPS + 1].eq(7).all() and values[h * STEPS + 1].eq(-7).all()  # this step's
        assert keys[h * STEPS].eq(100 * h + 1).all()  # the earlier step's, at this depth
    assert cache.steps == 1  # a step ends only when the stepper says so


def test_depths_no_layer_reached_repeat_the_deepest_written():
    cache = DecodingCache(3, ROWS, STEPS, HEADS, D_HEAD, like=torch.zeros(()))
    k = torch.randn(ROWS, HEADS, D_HEAD)
    cache.write(0, k, 2 * k)  # every node halted after the first ACT step
    cache.end_step()
    for d in (1, 2):
        torch.testing.assert_close(cache.blocks(d)[0][:, 0], k, rtol=0, atol=0)
        torch.testing.assert_close(cache.blocks(d)[1][:, 0], 2 * k, rtol=0, atol=0)


@pytest.mark.parametrize("copy_moved_only", [False, True])
def test_reorder_copies_each_row_from_its_parent_and_drop_leaves_the_rest(copy_moved_only):
    cache = cache_with_steps(depth=2, steps=2)
    parents = torch.tensor([2, 1])  # row 0 continues row 2, row 1 itself; row 2 is dropped
    moved = (parents != torch.arange(2)).nonzero().squeeze(1) if copy_moved_only else None
    cache.reorder(parents, moved)
    cache.drop(len(parents))
    assert cache.rows == 2 and cache.tables[0][0].shape[0] == 2 * STEPS
    for h, parent in enumerate(parents.tolist()):
        for t in range(2):
            for d in range(2):
                assert cache.blocks(d)[0][h, t].eq(100 * parent + 10 * t + d).all()
                assert cache.blocks(d)[1][h, t].eq(-(100 * parent + 10 * t + d)).all()


@pytest.mark.parametrize("kind, pairs", [("transformer", 2), ("universal", 1)])
def test_both_models_give_one_memory_pair_per_decoder_layer_and_their_target_limit(kind, pairs):
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(11, d_model=8, heads=2, d_ff=16, dropout=0.0, max_len=9, **extra).eval()
    memory_kv = model.memory_kv(torch.randn(5, 8))
    assert isinstance(memory_kv, list) and len(memory_kv) == pairs
    assert all(k.shape == v.shape == (5, 2, 4) for k, v in memory_kv)
    assert model.max_target_len == 9
    batch = make_batch(model.make_pool(), [[4, 5]])
    with pytest.raises(ValueError, match="max_steps 10 exceeds the positional table"):
        IncrementalStepper(model, batch, 1, 10, model.make_pool())
    assert IncrementalStepper(model, batch, 1, 9, model.make_pool()).cache.max_steps == 9
