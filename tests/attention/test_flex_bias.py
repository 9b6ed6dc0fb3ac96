"""Edge biases on the flex backend (`graphformer.attention.flex_bias`): what its score_mod holds
(node vectors and the bias's own table, never a query-by-key table), the compiled kernel with each
kind of position-derived bias and the kernels it builds, the weights, and what flex refuses: a type
given per edge (``auto`` passes it on), a learned table that needs gradients on a CPU, a bias on a
relation of a size past the kernel limit (run by the torch backend, bias and all).

tests/attention/test_edge_bias.py holds the dense float64 references (flex among the backends);
here flex is compared with the torch backend, which those references check. On a CPU everything
runs without gradients: FlexAttention has no backward pass there (tests/gpu/test_gpu.py).
"""

import dataclasses
import warnings

import pytest
import torch

from graphformer.attention import EdgeBias, flex, flex_calls, graph_attention, torch_ops
from graphformer.attention.flex_bias import for_kernel
from graphformer.errors import UserError
from graphformer.graphs import patterns
from graphformer.graphs.edge_types import Distance, Given, Relative, T5Buckets
from graphformer.graphs.relation import Relation

needs_flex = pytest.mark.skipif(flex.unavailable() is not None, reason=str(flex.unavailable()))
needs_cpu_kernel = pytest.mark.skipif(
    flex.unavailable() is not None or not flex.cpu_kernel_runs(), reason="Inductor builds no flex kernel on this CPU"
)
HEADS, DIM = 2, 8


def positioned(spec: str, lengths, num_types: int = 5, seed: int = 0) -> Relation:
    """Samples of ``lengths`` tokens one after another, each attending by pattern ``spec`` within
    itself; positions 0.. per sample and a random type per edge."""
    us, vs, positions, first = [], [], [], 0
    for n in lengths:
        u, v = patterns.parse(spec)(n, n)
        us.append(u + first)
        vs.append(v + first)
        positions.append(torch.arange(n))
        first += n
    u, v, pos = torch.cat(us), torch.cat(vs), torch.cat(positions)
    types = torch.randint(num_types, (len(u),), generator=torch.Generator().manual_seed(seed))
    return Relation.of_edges(
        u, v, first, first, verified=True, key_positions=pos, query_positions=pos, edge_types=types
    )


def qkv(n: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, HEADS, DIM, generator=gen) for _ in range(3))


def biases(num_queries: int, seed: int = 0) -> dict[str, EdgeBias]:
    """One bias of each kind flex serves: T5 buckets and a clipped relative table (T, H), ALiBi
    slopes times the distance, Shaw's per-query table (N_dst, H, T)."""
    gen = torch.Generator().manual_seed(seed)
    return {
        "t5": EdgeBias(T5Buckets(8, 20), table=torch.randn(8, HEADS, generator=gen)),
        "relative": EdgeBias(Relative(3), table=torch.randn(7, HEADS, generator=gen)),
        "alibi": EdgeBias(Distance(), slopes=-torch.tensor([0.5, 0.25])),
        "shaw": EdgeBias(Relative(2), table=torch.randn(num_queries, HEADS, 5, generator=gen)),
    }


def tensors_in(value, depth: int = 3) -> list[torch.Tensor]:
    """Every tensor a closure cell's value holds: itself, or in a dataclass's fields, a tuple or a list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0:
        return []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_in(item, depth - 1)]
    return []


@needs_flex
@pytest.mark.parametrize("kind", ["t5", "relative", "alibi", "shaw"])
def test_the_score_mod_holds_node_vectors_and_the_bias_table_never_a_query_by_key_table(kind):
    """4096 queries: a (query, key) table would hold 16.8 M entries; the score_mod's closure holds
    the two (padded nodes,) position vectors and the bias's own table or slopes, nothing else."""
    relation = positioned("window:4", [4096])
    bias = biases(relation.num_queries)[kind]
    layout = flex.layout_of(relation)
    ready = for_kernel(bias, relation, layout, torch.float32)
    held = [t for cell in ready.score_mod.__closure__ for t in tensors_in(cell.cell_contents)]
    assert {id(t) for t in held} == {id(t) for t in ready.captured}
    qpos, kpos, table = ready.captured
    assert qpos.shape == (layout.padded_queries,) and kpos.shape == (layout.padded_keys,)
    if kind == "shaw":  # one row per query, padded like the queries
        assert table.shape == (layout.padded_queries, *bias.table.shape[1:])
    else:
        assert table.shape == (bias.table if bias.slopes is None else bias.slopes).shape
    plane = layout.padded_queries * layout.padded_keys
    assert max(t.numel() for t in held) <= 16 * layout.padded_queries < plane // 100


@needs_flex
@pytest.mark.parametrize("kind", ["t5", "alibi", "shaw"])
def test_the_weights_include_the_bias(kind):
    relation = positioned("window:6+global:1", [70, 45])
    q, k, v = qkv(relation.num_queries, seed=1)
    bias = biases(relation.num_queries, seed=1)[kind]
    with torch.no_grad():
        out, weights = flex.attend(relation, q, k, v, return_weights=True, compiled=False, block=16, bias=bias)
        ref, ref_weights = torch_ops.attend(relation, q, k, v, return_weights=True, bias=bias)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
    unbiased = torch_ops.attend(relation, q, k, v, return_weights=True)[1]
    assert (weights - unbiased).abs().max() > 1e-2  # the bias moved them


@needs_flex
def test_a_type_given_per_edge_is_refused_by_flex_in_one_line():
    relation = positioned("window:3", [40])
    q, k, v = qkv(40)
    given = EdgeBias(Given(5), table=torch.zeros(5, HEADS))
    with torch.no_grad():
        with pytest.raises(UserError, match="flex cannot add a bias read from each edge's given type") as chosen:
            graph_attention(relation, q, k, v, "flex", bias=given)
        with pytest.raises(UserError, match="only biases derived from positions") as direct:
            flex.attend(relation, q, k, v, bias=given)
    assert "\n" not in str(chosen.value) and "\n" not in str(direct.value)


@needs_cpu_kernel
def test_auto_hands_flex_position_biases_and_passes_given_types_on(monkeypatch):
    """A long window without gradients: auto gives flex the call with a T5 bias (a stand-in for the
    compiled kernel: FlexAttention uncompiled, counted as compiled) and the other backends the call
    with a type given per edge; both equal the torch backend's."""
    monkeypatch.setattr(flex, "_FAILED", {})
    monkeypatch.setattr(flex, "_compiled", lambda threads: flex._kernel(False, "cpu"))
    relation = positioned("window:8", [1100])
    q, k, v = qkv(1100)
    position = biases(1100)["t5"]
    given = EdgeBias(Given(5), table=torch.randn(5, HEADS))
    for bias, flex_ran in ((position, 1), (given, 0)):
        before = flex_calls.snapshot()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = graph_attention(relation, q, k, v, "auto", bias=bias)
        torch.testing.assert_close(out, torch_ops.attend(relation, q, k, v, bias=bias), rtol=1e-5, atol=1e-5)
        assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=flex_ran)


@needs_flex
def test_a_learned_table_that_needs_gradients_is_refused_on_the_cpu():
    relation = positioned("window:8", [1100])
    q, k, v = qkv(1100)
    table = torch.randn(8, HEADS, requires_grad=True)  # a model's parameter while it trains
    bias = EdgeBias(T5Buckets(8, 20), table=table)
    assert not flex.runs_on(q, k, v, bias) and not flex.worth_it(relation, q, k, v, bias=bias)
    with pytest.raises(UserError, match="trains only on CUDA") as error:
        flex.attend(relation, q, k, v, bias=bias)
    assert "\n" not in str(error.value)
    with torch.no_grad():  # evaluation: the same table serves
        torch.testing.assert_close(
            flex.attend(relation, q, k, v, compiled=False, bias=bias),
            torch_ops.attend(relation, q, k, v, bias=bias),
            rtol=1e-5,
            atol=1e-5,
        )


@needs_flex
def test_a_relation_without_positions_says_so():
    bare = Relation.of_edges(*patterns.parse("window:2")(20, 20), 20, 20, verified=True)
    q, k, v = qkv(20)
    with torch.no_grad(), pytest.raises(ValueError, match="no node positions"):
        flex.attend(bare, q, k, v, compiled=False, bias=biases(20)["relative"])


@needs_cpu_kernel
def test_a_bias_is_a_kernel_of_its_own_and_past_the_limit_runs_on_the_torch_backend(monkeypatch):
    """The unbiased kernel of the size is built and the limit reached: auto still hands flex the
    unbiased call but not the biased one (its score_mod is another kernel), and a biased call named
    flex runs on torch, bias and all, counted as fallen back; no kernel compiles here."""
    relation = positioned("window:8", [1100])
    q, k, v = qkv(1100)
    bias = biases(1100)["alibi"]
    size = flex._size(torch.get_num_threads(), flex.layout_of(relation), HEADS, DIM, q.dtype)
    monkeypatch.setattr(flex, "MAX_CPU_KERNELS", 1)
    monkeypatch.setattr(flex, "_BUILT", {size})
    monkeypatch.setattr(flex, "_FAILED", {})
    before = flex_calls.snapshot()
    with torch.no_grad():
        assert flex.worth_it(relation, q, k, v) and not flex.worth_it(relation, q, k, v, bias=bias)
        out = flex.attend(relation, q, k, v, bias=bias)
    torch.testing.assert_close(out, torch_ops.attend(relation, q, k, v, bias=bias))
    calls = flex_calls.since(before)
    assert calls.compiled == 0 and sum(calls.fallen_back.values()) == 1
    assert "compiled 1 CPU kernel sizes" in next(iter(calls.fallen_back)) and not flex._FAILED


@needs_cpu_kernel
@pytest.mark.slow
def test_the_compiled_kernel_adds_each_bias_and_builds_one_kernel_per_kind():
    """The compiled CPU kernel (what the backend runs) with each kind of bias equals the torch
    backend; each kind builds one kernel (one dynamo graph) for the size, and new table values, a
    learned table evaluated without gradients, or another node count of the same padded size build
    none. T5's log runs inside the generated C++."""
    from torch._dynamo.utils import counters

    kernels, graphs, before = len(flex._BUILT), counters["stats"]["unique_graphs"], flex_calls.snapshot()
    built = []
    for lengths, seed in (([60, 50], 0), ([70, 41], 1)):  # 110 and 111 nodes: one padded size, 128
        relation = positioned("window:5+global:1", lengths)
        q, k, v = qkv(relation.num_queries, seed)
        for kind, bias in biases(relation.num_queries, seed).items():
            if seed:  # a model's parameter, evaluated
                bias = dataclasses.replace(bias, table=bias.table.requires_grad_()) if bias.table is not None else bias
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # a fallback warns
                out = flex.attend(relation, q, k, v, bias=bias)
                torch.testing.assert_close(
                    out, torch_ops.attend(relation, q, k, v, bias=bias), rtol=1e-5, atol=1e-5, msg=kind
                )
            built.append((len(flex._BUILT) - kernels, counters["stats"]["unique_graphs"] - graphs))
    assert built == [(1, 1), (2, 2), (3, 3), (4, 4)] + [(4, 4)] * 4
    assert flex_calls.since(before) == flex_calls.FlexCalls(compiled=8)
