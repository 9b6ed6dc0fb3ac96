"""How the flex backend's calls are served, read off their counts (`flex_calls`): by the
compiled CPU kernels, one per shared size and thread count and at most `flex.MAX_CPU_KERNELS` of
them, or by the blocked or torch backend where a kernel failed to build or would be one too many;
and which calls ``auto`` hands flex then. Slow tests compile real kernels; the others replace the
kernel (a build failure, or FlexAttention uncompiled counted as compiled) or stop before one builds.
"""

import sys
import warnings

import pytest
import torch

from graphformer.attention import flex, flex_calls, graph_attention, torch_ops
from graphformer.graphs import patterns
from graphformer.graphs.relation import Relation

needs_flex = pytest.mark.skipif(flex.unavailable() is not None, reason=str(flex.unavailable()))
HEADS, DIM = 2, 8


def pattern_relation(spec, num_keys, num_queries):
    return Relation.of_edges(*patterns.parse(spec)(num_keys, num_queries), num_keys, num_queries)


@needs_flex
def test_a_kernel_that_fails_to_build_falls_back_to_the_exact_backends(monkeypatch):
    """torch's CPU code generator fails on some second block layouts of one size: the call (and
    every later one of the process) runs on blocked or torch, with a warning, and auto stops
    choosing flex."""

    class InductorError(RuntimeError):  # the name torch._inductor.exc gives its error
        pass

    def fails(*args, **kwargs):
        raise InductorError("CppCompileError: C++ compile error")

    monkeypatch.setattr(flex, "_kernel", lambda compiled, device_type: fails if compiled else torch_ops.attend)
    monkeypatch.setattr(flex, "_FAILED", {})
    n = 1100
    relation = Relation.of_edges(*patterns.parse("window:8")(n, n), n, n)
    q = torch.randn(n, HEADS, DIM)
    before = flex_calls.snapshot()
    with torch.no_grad():
        assert flex.worth_it(relation, q, q, q) == flex.runs_on(q, q, q)
        with pytest.warns(RuntimeWarning, match="now run on the blocked or torch backend"):
            out, weights = flex.attend(relation, q, q, q, return_weights=True)
        ref, ref_weights = torch_ops.attend(relation, q, q, q, return_weights=True)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(weights, ref_weights)
        assert "cpu" in flex._FAILED and not flex.worth_it(relation, q, q, q)
        torch.testing.assert_close(flex.attend(relation, q, q, q), ref)  # no second try, no second warning
        after_failure = flex_calls.snapshot()
        torch.testing.assert_close(graph_attention(relation, q, q, q, "auto"), ref)
    calls = flex_calls.since(before)
    assert calls.compiled == calls.uncompiled == 0 and calls.fallen_back == {"CppCompileError: C++ compile error": 2}
    assert flex_calls.since(after_failure).total == 0  # auto no longer hands flex the call
    line = flex_calls.summary(calls)
    assert (
        line.startswith("flex attention: 0 of 2 calls ran compiled; 2 ran on blocked/torch")
        and "CppCompileError" in line
    )


@needs_flex
def test_auto_hands_flex_long_filled_relations_and_counts_them(monkeypatch):
    """auto's choice, read off the counts: a long window goes to flex (here a stand-in kernel, so
    that no compilation runs), a short one and a call after a build failure do not."""
    if not flex.cpu_kernel_runs():
        pytest.skip("this CPU has no AVX2: auto never hands flex a CPU call here")
    monkeypatch.setattr(flex, "_FAILED", {})
    monkeypatch.setattr(
        flex, "_compiled", lambda threads: flex._kernel(False, "cpu")
    )  # uncompiled, counted as compiled
    long_one, short = pattern_relation("window:8", 1100, 1100), pattern_relation("window:8", 300, 300)
    q = torch.randn(1100, HEADS, DIM)
    before = flex_calls.snapshot()
    with torch.no_grad():
        for relation in (long_one, short):
            x = q[: relation.num_queries]
            torch.testing.assert_close(graph_attention(relation, x, x, x, "auto"), torch_ops.attend(relation, x, x, x))
    assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=1)
    graph_attention(long_one, q.requires_grad_(), q, q, "auto")  # needs gradients: not flex
    assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=1)


@needs_flex
def test_past_the_most_kernel_sizes_calls_go_to_the_exact_backends_and_auto_keeps_them(monkeypatch):
    """A call whose size would compile one CPU kernel too many runs on blocked/torch, counted with
    the reason; it does not stop flex for the sizes already built. ``auto`` hands flex no call of
    a new size then (flex would only hand it on), but still those of a size already built."""
    if not flex.cpu_kernel_runs():
        pytest.skip("this CPU has no AVX2: FlexAttention's CPU kernel does not compile here")
    monkeypatch.setattr(flex, "MAX_CPU_KERNELS", 0)
    monkeypatch.setattr(flex, "_FAILED", {})
    monkeypatch.setattr(flex, "_BUILT", set())
    relation = pattern_relation("window:5", 100, 100)
    q, k, v = (torch.randn(relation.num_queries, 3, 4) for _ in range(3))
    before = flex_calls.snapshot()
    with torch.no_grad():
        torch.testing.assert_close(flex.attend(relation, q, k, v), torch_ops.attend(relation, q, k, v))
    calls = flex_calls.since(before)
    assert calls.compiled == 0 and sum(calls.fallen_back.values()) == 1 and not flex._FAILED
    assert "compiled 0 CPU kernel sizes" in next(iter(calls.fallen_back))

    built, new = pattern_relation("window:8", 1100, 1100), pattern_relation("window:8", 2100, 2100)  # 2048, 4096
    x = torch.randn(2100, 3, 4)
    monkeypatch.setattr(flex, "MAX_CPU_KERNELS", 1)
    monkeypatch.setattr(flex, "_BUILT", {flex._size(torch.get_num_threads(), flex.layout_of(built), 3, 4, x.dtype)})
    before = flex_calls.snapshot()
    with torch.no_grad():
        assert flex.worth_it(built, x[:1100]) and not flex.worth_it(new, x)
        torch.testing.assert_close(graph_attention(new, x, x, x, "auto"), torch_ops.attend(new, x, x, x))
    assert flex_calls.since(before).total == 0  # auto gave flex no call to hand on


@needs_flex
@pytest.mark.slow
def test_compiled_flex_runs_compiled_and_exact_on_two_layouts_of_one_size():
    """Two layouts of one size whose bitmaps differ in length (10 and 6 partial blocks): torch
    2.11's code generator failed to build the second with automatic dynamic shapes
    (benchmarks/flex_cpu_dynamic_shapes.py); kernels for fixed, shared sizes build both, and
    then serve a third relation of another node count in the same bucket without compiling:
    neither this process's kernels (`flex._BUILT`) nor the graphs dynamo compiled grow with it."""
    if not flex.cpu_kernel_runs():
        pytest.skip("this CPU has no AVX2: FlexAttention's CPU kernel does not compile here")
    from torch._dynamo.utils import counters

    before, kernels, graphs = flex_calls.snapshot(), len(flex._BUILT), counters["stats"]["unique_graphs"]
    built = []
    for spec, n in (("window:8", 256), ("window:130", 256), ("window:8", 200)):
        relation = Relation.of_edges(*patterns.parse(spec)(n, n), n, n)
        q, k, v = (torch.randn(n, 2, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a fallback warns
            torch.testing.assert_close(
                flex.attend(relation, q, k, v), torch_ops.attend(relation, q, k, v), atol=1e-5, rtol=1e-5
            )
        built.append((len(flex._BUILT) - kernels, counters["stats"]["unique_graphs"] - graphs))
    assert built == [(1, 1), (2, 2), (2, 2)]
    assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=3)


ONE_CALL = """
import sys, torch
from graphformer.attention import flex, torch_ops
from graphformer.graphs.relation import Relation
torch.set_num_threads(int(sys.argv[1]))
gen = torch.Generator().manual_seed(0)
mask = torch.rand(38, 38, generator=gen) < 0.3
mask[torch.arange(38), torch.arange(38)] = True
v, u = mask.nonzero(as_tuple=True)
relation = Relation.of_edges(u, v, 38, 38)
q, k, x = (torch.randn(38, 2, 4, generator=gen) for _ in range(3))
with torch.no_grad():
    torch.testing.assert_close(flex.attend(relation, q, k, x), torch_ops.attend(relation, q, k, x), atol=1e-5, rtol=1e-5)
"""


@needs_flex
@pytest.mark.slow
@pytest.mark.skipif(not flex.cpu_kernel_runs(), reason="Inductor builds no FlexAttention kernel for this CPU")
def test_a_kernel_built_under_one_thread_count_is_not_run_under_another(tmp_path):
    """Inductor sizes a CPU kernel's buffers by the thread count it was built for and did not key
    its disk cache by it: a process with 2 threads loaded the kernel a 1-thread process had built
    and wrote past its buffers (glibc aborted). Each count now builds its own."""
    import os
    import subprocess

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    for threads in (1, 2):
        done = subprocess.run([sys.executable, "-c", ONE_CALL, str(threads)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["threads-1", "threads-2"]
