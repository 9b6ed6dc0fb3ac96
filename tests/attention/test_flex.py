"""The flex backend (torch's FlexAttention over a block mask of the edges) against the torch
backend's edge-wise attention: outputs and weights, on relations of several samples, windows,
cross attention and queries of a single key; its refusals; and ``auto``'s question, `worth_it`.

Most cases run FlexAttention uncompiled (``compiled=False``: the same block mask and mask_mod,
without the ~30 s compilation); a slow test runs the compiled kernel, the one the backend uses, on
relations of several sizes and asserts how its calls were served (`flex_calls`);
tests/attention/test_flex_kernels.py tests the kernels' sizes, their limit and the fallbacks. All
run without gradients on the CPU, where FlexAttention has no backward pass. On torch < 2.5 only
the refusal tests run.
"""

import sys

import pytest
import torch
from helpers import refused_training

from graphformer.attention import flex, flex_calls, flex_layout, torch_ops
from graphformer.errors import UserError
from graphformer.graphs import patterns
from graphformer.graphs.relation import Relation

needs_flex = pytest.mark.skipif(flex.unavailable() is not None, reason=str(flex.unavailable()))
HEADS, DIM = 2, 8


def sample_relation(key_counts, query_counts, p, seed):
    """Samples numbered one after another, each query attending to a random subset (at least one)
    of its own sample's keys; edges in a shuffled order (a backend must keep the relation's)."""
    gen = torch.Generator().manual_seed(seed)
    us, vs, k0, q0 = [], [], 0, 0
    for nk, nq in zip(key_counts, query_counts):
        mask = torch.rand(nq, nk, generator=gen) < p
        mask[torch.arange(nq), torch.randint(nk, (nq,), generator=gen)] = True
        v, u = mask.nonzero(as_tuple=True)
        us.append(u + k0)
        vs.append(v + q0)
        k0, q0 = k0 + nk, q0 + nq
    u, v = torch.cat(us), torch.cat(vs)
    order = torch.randperm(len(u), generator=gen)
    return Relation(u[order], v[order], k0, q0, torch.tensor(key_counts), torch.tensor(query_counts))


def pattern_relation(spec, num_keys, num_queries):
    u, v = patterns.parse(spec)(num_keys, num_queries)
    return Relation(u, v, num_keys, num_queries)


def one_key_relation():
    """Query 0 has a single key (key 2); the others attend to a window; 70 keys, 45 queries."""
    u, v = patterns.window(3)(70, 45)
    keep = (v != 0) | (u == 2)
    return Relation(u[keep], v[keep], 70, 45)


CASES = {
    "samples": lambda: sample_relation([13, 40, 7, 29], [13, 40, 7, 29], 0.3, seed=0),
    "samples, cross": lambda: sample_relation([21, 5, 50], [9, 33, 12], 0.4, seed=1),
    "window": lambda: pattern_relation("window:5", 100, 100),
    "window+global, cross": lambda: pattern_relation("window:4+global:2", 37, 90),
    "full, cross": lambda: pattern_relation("full", 19, 40),
    "one key": one_key_relation,
}


def qkv(relation, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(relation.num_queries, HEADS, DIM, generator=gen) * scale
    k, v = (torch.randn(relation.num_keys, HEADS, DIM, generator=gen) for _ in range(2))
    return q, k, v


def assert_matches_torch_backend(relation, q, k, v, weight_tolerance=1e-5, **options):
    """Outputs and weights within float32 rounding of the torch backend's; weights that sum to 1."""
    with torch.no_grad():
        out, weights = flex.attend(relation, q, k, v, return_weights=True, **options)
        ref_out, ref_weights = torch_ops.attend(relation, q, k, v, return_weights=True)
    assert out.shape == ref_out.shape and weights.shape == ref_weights.shape == (relation.num_edges, HEADS, 1)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, ref_weights, rtol=weight_tolerance, atol=1e-6)
    sums = torch.zeros(relation.num_queries, HEADS, 1).index_add_(0, relation.v, weights)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    return out


def test_without_flexattention_the_backend_says_what_to_install_in_one_line(monkeypatch):
    """On torch < 2.5 (or with FlexAttention hidden, as here on newer torch) `unavailable` gives the
    reason, `runs_on` and `worth_it` say no, and a call is one UserError line naming the fix."""
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)  # import raises ImportError
    flex.unavailable.cache_clear()
    try:
        reason = flex.unavailable()
        relation = pattern_relation("window:1", 4, 4)
        q = torch.randn(4, 1, 4)
        assert not flex.runs_on(q) and not flex.worth_it(relation, q)
        with pytest.raises(UserError) as error:
            flex.attend(relation, q, q, q)
    finally:
        monkeypatch.undo()
        flex.unavailable.cache_clear()
    assert reason == str(error.value) and "\n" not in reason
    assert "torch >= 2.5" in reason and torch.__version__ in reason and "blocked/torch" in reason


@needs_flex
@pytest.mark.parametrize("case", list(CASES))
def test_flex_equals_the_torch_backend(case):
    relation = CASES[case]()
    assert_matches_torch_backend(relation, *qkv(relation), compiled=False, block=16)


@needs_flex
@pytest.mark.parametrize("block", [8, (16, 32), 64])
def test_any_block_shape_gives_the_same_attention(block):
    """Blocks wider than the relation, unequal sides, node counts that are no multiple of them:
    padding and the bitmap keep exactly the edges."""
    relation = CASES["samples, cross"]()
    assert_matches_torch_backend(relation, *qkv(relation, seed=3), compiled=False, block=block)


@needs_flex
def test_weights_sum_to_one_for_large_scores():
    """Scores in the thousands: float32 keeps about 1e-4 of them, so the weights differ from the
    torch backend's (scores summed in another order) by about that, but still sum to 1."""
    relation = CASES["samples"]()
    assert_matches_torch_backend(
        relation, *qkv(relation, seed=5, scale=300.0), weight_tolerance=1e-3, compiled=False, block=16
    )


@needs_flex
def test_the_layout_skips_empty_blocks_and_unmasks_full_ones():
    """block:8 over 44 tokens, in 8 x 8 blocks: the five whole diagonal blocks are full (no
    bitmap), the last one, 4 tokens and 4 padded ones, is partial with its padding masked, and the
    other blocks are in no list."""
    relation = pattern_relation("block:8", 44, 44)
    layout = flex.layout_of(relation, 8, shared_sizes=False)
    assert layout is flex.layout_of(relation, 8, shared_sizes=False)  # kept with the relation
    assert (layout.padded_queries, layout.padded_keys) == (48, 48)
    assert layout.full == 5 and layout.partial == 1  # the last block holds 4 x 4 edges of 8 x 8
    assert layout.bits.shape == (2 + 1, 8, 8) and layout.table.shape == (6, 6)
    last = layout.bits[int(layout.table[5, 5])]
    assert last[:4, :4].all() and not last[4:].any() and not last[:, 4:].any()
    assert layout.block_mask.kv_num_blocks.tolist() == [[[0, 0, 0, 0, 0, 1]]]
    assert layout.block_mask.full_kv_num_blocks.tolist() == [[[1, 1, 1, 1, 1, 0]]]


@needs_flex
def test_shared_sizes_round_blocks_and_slots_up_to_powers_of_two():
    """The CPU layout of the same 44 tokens: 6 blocks a side become 8 and 3 bitmap slots 4; the
    added blocks list no key block, so the kernel's output is the same attention."""
    relation = pattern_relation("block:8", 44, 44)
    layout = flex.layout_of(relation, 8, shared_sizes=True)
    assert layout is flex.layout_of(relation, 8) and layout is not flex.layout_of(relation, 8, shared_sizes=False)
    assert (layout.padded_queries, layout.padded_keys) == (64, 64)
    assert layout.table.shape == (8, 8) and layout.bits.shape == (4, 8, 8) and not layout.bits[3].any()
    assert layout.block_mask.kv_num_blocks.tolist() == [[[0, 0, 0, 0, 0, 1, 0, 0]]]
    assert layout.block_mask.full_kv_num_blocks.tolist() == [[[1, 1, 1, 1, 1, 0, 0, 0]]]
    assert [flex_layout.shared_size(n) for n in (1, 2, 3, 4, 5, 17, 64)] == [1, 2, 4, 4, 8, 32, 64]
    for case in ("samples, cross", "window+global, cross"):
        relation = CASES[case]()
        q, k, v = qkv(relation, seed=9)
        layout = flex.layout_of(relation, 16, shared_sizes=True)
        with torch.no_grad():
            out = flex._kernel(False, "cpu")(
                layout.pad_queries(q), layout.pad_keys(k), layout.pad_keys(v), layout, DIM**-0.5
            )
            torch.testing.assert_close(
                out[0].transpose(0, 1)[: relation.num_queries],
                torch_ops.attend(relation, q, k, v),
                rtol=1e-5,
                atol=1e-5,
            )


@needs_flex
def test_keys_that_no_edge_names_never_reach_a_result():
    """A decoding cache leaves slots past the current step unwritten: NaN in keys that no edge
    names changes nothing, though their block's products span them."""
    u, v = patterns.window(2)(30, 20)
    keep = u < 24  # keys 24..29 are named by no edge
    relation = Relation(u[keep], v[keep], 30, 20)
    q, k, v_ = qkv(relation, seed=2)
    reference = assert_matches_torch_backend(relation, q, k, v_, compiled=False, block=16)
    k[24:], v_[24:] = float("nan"), float("nan")
    with torch.no_grad():
        torch.testing.assert_close(flex.attend(relation, q, k, v_, compiled=False, block=16), reference)


@needs_flex
def test_one_tensor_as_queries_keys_and_values():
    relation = pattern_relation("window:3", 64, 64)  # whole blocks: no padding copy
    x = torch.randn(64, HEADS, DIM)
    assert_matches_torch_backend(relation, x, x, x, compiled=False, block=16)


@needs_flex
def test_training_on_the_cpu_is_one_line_naming_the_backends_that_train():
    relation = CASES["window"]()
    q, k, v = qkv(relation)
    q.requires_grad_()
    with pytest.raises(UserError) as error:
        flex.attend(relation, q, k, v, compiled=False)
    message = str(error.value)
    assert "\n" not in message and "only on CUDA" in message and "blocked" in message and "torch" in message
    assert not flex.runs_on(q, k, v)
    with torch.no_grad():  # the same tensors serve a forward pass without gradients
        assert flex.runs_on(q, k, v) == flex.cpu_kernel_runs()
        flex.attend(relation, q, k, v, compiled=False, block=16)


@needs_flex
def test_a_dtype_the_kernels_do_not_compute_in_is_refused():
    relation = CASES["window"]()
    q, k, v = (x.double() for x in qkv(relation))
    assert not flex.runs_on(q)
    with torch.no_grad(), pytest.raises(UserError, match="float32, bfloat16 or float16"):
        flex.attend(relation, q, k, v)


@needs_flex
def test_a_relation_without_queries():
    relation = Relation(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 5, 0)
    q, k, v = qkv(relation)
    with torch.no_grad():
        out, weights = flex.attend(relation, q, k, v, return_weights=True, compiled=False)
    assert out.shape == (0, HEADS, DIM) and weights.shape == (0, HEADS, 1)


@needs_flex
def test_worth_it_takes_long_filled_relations_without_gradients():
    x = torch.randn(2048, 1, 4)
    window = pattern_relation("window:64", 2048, 2048)
    with torch.no_grad():
        assert flex.worth_it(window, x) == flex.cpu_kernel_runs()
        assert not flex.worth_it(pattern_relation("window:64", 512, 512), x[:512])  # short
        assert not flex.worth_it(pattern_relation("random:2", 2048, 2048), x)  # scattered: blocks mostly empty
        assert not flex.worth_it(window, x.double())
    assert not flex.worth_it(window, x.requires_grad_())  # no backward pass on the CPU


@needs_flex
@pytest.mark.slow
def test_the_compiled_kernel_equals_the_torch_backend_across_sizes():
    """The compiled kernel, what the backend runs: one relation of several samples, then a cross
    relation of other sizes (the compilation with dynamic shapes), under inference mode too."""
    if not flex.cpu_kernel_runs():
        pytest.skip("this CPU has no AVX2: FlexAttention's CPU kernel does not compile here")
    first = sample_relation([130, 64, 200], [130, 64, 200], 0.05, seed=4)
    second = pattern_relation("window:16+global:1", 300, 170)
    before = flex_calls.snapshot()
    for relation in (first, second):
        assert_matches_torch_backend(relation, *qkv(relation, seed=6))
    with torch.inference_mode():
        q, k, v = qkv(first, seed=7)
        torch.testing.assert_close(flex.attend(first, q, k, v), torch_ops.attend(first, q, k, v), rtol=1e-5, atol=1e-5)
    assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=3)


@needs_flex
def test_weights_computed_one_block_at_a_time(monkeypatch):
    """The weights' scores come block by block in chunks (`FlexLayout.edge_scores`); chunks of one
    block give the same weights, in the relation's edge order."""
    monkeypatch.setattr(flex_layout, "CHUNK_BYTES", 1)
    relation = CASES["samples, cross"]()
    assert_matches_torch_backend(relation, *qkv(relation, seed=8), compiled=False, block=8)


@pytest.mark.parametrize(
    "argv, message",
    [(["--lengths", "1"], "--lengths must be at least 2"), (["--rounds", "0"], "--rounds: must be at least 1")],
)
def test_the_benchmark_refuses_what_it_cannot_measure(tmp_path, argv, message):
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.flex_attention", *argv, "--out", str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not list(tmp_path.iterdir())


@needs_flex
def test_auto_leaves_batches_of_short_samples_and_decoding_rows_to_the_others():
    """Many short sentences make a long relation, but each new batch would be a new layout (and
    on a first call, a compilation) for no gain: translation stays with padded and the others."""
    short = sample_relation([12] * 100, [12] * 100, 0.5, seed=3)  # 1200 queries in samples of 12
    long_one = Relation.of_edges(
        *patterns.parse("window:8")(1200, 1200), 1200, 1200, torch.tensor([1200]), torch.tensor([1200])
    )
    rows = Relation.of_rows(torch.arange(1200)[:, None], 1200)
    q = torch.randn(1200, HEADS, DIM)
    with torch.no_grad():
        assert not flex.worth_it(short, q, q, q) and not flex.worth_it(rows, q, q, q)
        assert flex.worth_it(long_one, q, q, q) == flex.runs_on(q, q, q)


def test_training_with_flex_on_this_cpu_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """torch 2.2 has no FlexAttention, a newer torch has no backward pass for it on a CPU: either
    way ``train --attention-backend flex`` here is one line, exit 2, and no run folder."""
    line = refused_training(tmp_path, "flex")
    assert "--attention-backend" in line
    assert ("torch >= 2.5" in line) if flex.unavailable() else ("only on CUDA" in line and "auto" in line)
