r"""Graph attention through PyTorch's FlexAttention: the relation's edges as a block mask.

All the nodes of a relation are one flat sequence (batch 1, H heads): query i is row i, key j is
column j. No edge of a batch crosses samples, so the samples need no batch axis of their own: the
blocks between two samples hold no edge and are skipped like any other empty block. The
(query, key) plane is cut into BQ x BK blocks (`BLOCK`), and each block is one of three kinds:

    empty     no edge                  never computed
    full      every pair is an edge    computed without a mask (``full_kv_*`` of the BlockMask)
    partial   some pairs are edges     masked by its bitmap: bits[table[i // BQ, j // BK], i % BQ, j % BK]

and FlexAttention computes, over the non-empty blocks only,

    S_vu   = scale * q_v . k_u + b_uv               for the pairs (u, v) of those blocks (b: `flex_bias`, or 0)
    out_v  = sum_u softmax_u(S_v.)[u] v_u           the softmax over v's in-edges (masked pairs: -inf)

which is graph attention over the edges exactly. The per-edge weights, when asked for, are the
same softmax read off the edges (`FlexLayout.edge_weights`).

The block layout (`FlexLayout`) is made from the edges with `BlockMask.from_kv_blocks`: a
(q_blocks, k_blocks) table of bitmap slots (FlexAttention's own block indices are that dense too)
and one BQ x BK bitmap per partial block, so O(E + q_blocks * k_blocks + partial * BQ * BK) work
and memory. Nothing of size N_dst x N_src exists, and the layout is kept with the relation
(`Relation.layout`), so every layer of a batch reuses it. Node counts are padded to whole blocks:
padded keys are in no block's bitmap (never attended) and padded query rows, which see no key,
are dropped from the output.

FlexAttention needs torch >= 2.5 (`unavailable`); the import is lazy, so this module imports on older
torch. It is fast only compiled (`torch.compile`, see `_compiled` for how kernels are shared among
sizes); uncompiled it materialises every score of the padded plane, which only tests can afford
(``compiled=False``). On the CPU torch's FlexAttention has no backward
pass and its compiled kernel returns no lse: the backend serves forward passes without gradients
there (evaluation, decoding), and a call that needs gradients on the CPU raises a one-line
`UserError` naming the backends that train there. It raises rather than handing the call to
another backend: a backend named by the user is the one that runs (a silent substitute would put
its time and memory under flex's name), and choosing among backends is ``auto``'s job, for which
`worth_it` refuses such calls. The weights are normalised over the edges' own scores
(`FlexLayout.edge_scores`): the compiled CPU kernel cannot return the lse.

Each call is counted (`graphformer.attention.flex_calls`): compiled, uncompiled, or handed to the
blocked or torch backend (`_fallback`: where the compiled CPU kernel failed to build, or a size
would pass `MAX_CPU_KERNELS`).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import tempfile
import warnings

import torch

from graphformer.attention import flex_calls, torch_ops
from graphformer.attention.bias import EdgeBias
from graphformer.attention.flex_bias import NO_BIAS, FlexBias, for_kernel, kernel_key, learned
from graphformer.attention.flex_layout import FlexLayout
from graphformer.errors import UserError
from graphformer.graphs.relation import Relation

# Block sides. FlexAttention's Triton (CUDA) kernels are tuned for its default, 128. On the CPU,
# where a partial block's mask is read element by element, smaller blocks pay: more of them are
# full (a window of w keys either side keeps its diagonal blocks full while the side is at most
# w + 1, so window:64 has full blocks at 64 and none at 128), and less masked work is done.
BLOCK = {"cuda": 128, "cpu": 64}
# Devices where ``auto`` hands calls to flex (`worth_it`): those where it was timed against the
# other backends (benchmarks/flex_attention.py, docs/results.md). On CUDA it runs when named.
AUTO_DEVICES = ("cpu",)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the compiled kernels compute in


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None if this torch has FlexAttention, else why not (one line: what to install or choose).
    Asked on every ``auto`` call, so the answer is kept (``unavailable.cache_clear()`` asks again)."""
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError:
        return (
            f"the flex backend needs torch >= 2.5 (torch.nn.attention.flex_attention); this torch is "
            f"{torch.__version__}: install the current stack or choose blocked/torch"
        )
    return None


def _require() -> None:
    reason = unavailable()
    if reason is not None:
        raise UserError(reason)


def runs_on(q: torch.Tensor, k=None, v=None, bias: EdgeBias | None = None) -> bool:
    """Whether the compiled kernel serves a call on these tensors (and ``bias``'s table or slopes):
    in float32, bfloat16 or float16 (`DTYPES`), on CUDA, or on the CPU where none needs a gradient
    (it has no backward pass there) and `cpu_kernel_runs`."""
    if unavailable() is not None or q.device.type not in ("cuda", "cpu") or q.dtype not in DTYPES:
        return False
    return q.device.type == "cuda" or (not _needs_grad(q, k, v, *learned(bias)) and cpu_kernel_runs())


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def cpu_kernel_runs() -> bool:
    """Whether Inductor generates FlexAttention's CPU kernel here: torch >= 2.6 (2.5 compiles it for
    CUDA only) and what Inductor asks of the CPU (AVX2, not macOS), read without importing Inductor."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    avx2 = getattr(torch.cpu, "_is_avx2_supported", lambda: False)()
    return (
        (major, minor) >= (2, 6)
        and avx2
        and os.environ.get("ATEN_CPU_CAPABILITY") != "default"
        and sys.platform != "darwin"
    )


def default_block(device: torch.device | str) -> int:
    """The block side for a device (`BLOCK`; 128 for devices not listed)."""
    return BLOCK.get(torch.device(device).type, 128)


def layout_of(
    relation: Relation, block: int | tuple[int, int] | None = None, shared_sizes: bool | None = None
) -> FlexLayout:
    """The relation's layout for ``block`` (default: `default_block` of its device), built once
    and kept with the relation. ``shared_sizes`` (default: on a CPU, whose compiled kernels are
    one per size, see `_compiled`) rounds its sizes up to powers of two (`FlexLayout`)."""
    _require()
    block = default_block(relation.device) if block is None else block
    block = (block, block) if isinstance(block, int) else tuple(block)
    shared = relation.device.type == "cpu" if shared_sizes is None else shared_sizes
    return relation.layout(
        ("flex", block, shared), lambda r: FlexLayout(r.u, r.v, r.num_keys, r.num_queries, block, shared)
    )


def worth_it(
    relation: Relation,
    q: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    min_queries: int = 1024,
    min_fill: float = 0.025,
    block: int | None = None,
    bias: EdgeBias | None = None,
) -> bool:
    """Whether ``auto`` should hand this call (with ``bias``, one flex serves) to flex: q is on a
    device of `AUTO_DEVICES` where the compiled kernel serves it (`runs_on`: on the CPU, no
    gradients), the relation is long (at least ``min_queries`` queries: on shorter ones the other
    backends are as fast, and the first call's compilation is not repaid; a batch of short samples,
    or decoding's rows of keys, is not long), and its edges fill at least ``min_fill`` of the pairs
    of the blocks they touch. The kernel's work grows with those pairs and the edge-wise backends' with
    the edges, at a far higher cost per edge than the kernel's per pair, so a block may be mostly
    masked and still pay: windows, dilations and BP trees fill enough (a tree's span nodes come
    after its tokens, so a block of tokens touches many blocks of spans, sparsely), token-level
    random links over long sequences (a block of queries then touches most key blocks) do not.
    Near that fill the kernel is about as fast as the torch backend and holds far less memory (no
    (E, H, d) messages). Nor does ``auto`` hand flex a call of a new size once the process has
    built its `MAX_CPU_KERNELS` CPU kernels: flex would hand it on to blocked/torch. The layout
    built to decide is the one `attend` then uses."""
    if (
        q.device.type not in AUTO_DEVICES
        or q.device.type in _FAILED
        or relation.num_queries < min_queries
        or relation.num_edges == 0
        or not runs_on(q, k, v, bias)
    ):
        return False
    block = default_block(q.device) if block is None else block
    if not relation.layout(("flex pays", min_fill, block), lambda r: _pays(r, block, min_queries, min_fill)):
        return False
    # Asked at each call, not kept with the relation: the set of kernels built so far grows.
    layout = layout_of(relation, block)
    size = _size(torch.get_num_threads(), layout, q.shape[1], q.shape[2], q.dtype, kernel_key(bias))
    return q.device.type != "cpu" or not _would_build(size)  # only CPU kernels are one per size


def _pays(r: Relation, block: int, min_queries: int, min_fill: float) -> bool:
    """Whether the relation is long and filled enough for flex to pay (see `worth_it`)."""
    if r.groups is not None or r.key_rows is not None:  # decoding's rows: a new layout at every step
        return False
    if r.query_counts is not None and int(r.query_counts.max()) < min_queries:  # many short samples
        return False
    layout = layout_of(r, block)
    touched = (layout.partial + layout.full) * layout.block[0] * layout.block[1]
    return r.num_edges >= min_fill * touched


def _kernel(compiled: bool, device_type: str):
    """FlexAttention as ``kernel(Q, K, V, layout, scale, bias=NO_BIAS)`` (a `FlexBias`): compiled
    (`_compiled`: on the CPU per thread count and per size), or not compiled at all."""
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return lambda Q, K, V, layout, scale, bias=NO_BIAS: flex_attention(
            Q, K, V, bias.score_mod, block_mask=layout.block_mask, scale=scale
        )
    return _compiled(torch.get_num_threads() if device_type == "cpu" else 0)


CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
# Kernel sizes one process compiles on the CPU at most (`_compiled`); powers of two keep a model's
# relations to a few (each costs seconds to tens of seconds to build).
MAX_CPU_KERNELS = 32


# The CPU kernels built in this process, by `_size`. All are torch.compile entries of one
# function, flex_attention, whose limit counts them together.
_BUILT: set[tuple] = set()


class TooManySizes(RuntimeError):
    """A call of a size that would compile one CPU kernel more than `MAX_CPU_KERNELS`."""


def _size(threads: int, layout: FlexLayout, heads: int, dim: int, dtype: torch.dtype, bias_key=None) -> tuple:
    """What a CPU kernel is compiled for (``dynamic=False``: every shape is fixed): the thread
    count, the padded query and key counts, the head count and size, the bitmap's shape
    (slots, BQ, BK), the dtype, and the bias's `flex_bias.kernel_key` (a score_mod is another kernel)."""
    return (threads, layout.padded_queries, layout.padded_keys, heads, dim, tuple(layout.bits.shape), dtype, bias_key)


def _would_build(size: tuple) -> bool:
    """Whether a call of this `_size` would build one CPU kernel past `MAX_CPU_KERNELS`."""
    return size not in _BUILT and len(_BUILT) >= MAX_CPU_KERNELS


@functools.cache
def _compiled(threads: int):
    """FlexAttention compiled for ``threads`` CPU threads (0: for a GPU).

    Node counts change with every batch. On a GPU torch.compile's default (automatic dynamic
    shapes) serves them: the first call compiles for its sizes, the first call with other sizes
    compiles once more with the node and block counts symbolic, and every later size reuses that
    kernel. On the CPU that symbolic kernel does not build (torch 2.11 to 2.14): Inductor's C++
    template names its tile sizes as size symbols and renames them back by replacing text, so the
    tile's ``ks1`` -> ``cur_qSplitSize`` also turns the bitmap's size ``ks18`` into an undeclared
    ``cur_qSplitSize8`` (benchmarks/flex_cpu_dynamic_shapes.py reproduces it). So CPU kernels are
    compiled for fixed sizes (``dynamic=False``: no size symbol exists to be renamed), and CPU
    layouts round their sizes up to powers of two (`FlexLayout`'s ``shared_sizes``), so relations
    of many sizes share a few kernels. A process builds at most `MAX_CPU_KERNELS` (torch.compile's
    own limit per function, 8, is raised for these calls); a call of a further size raises
    `TooManySizes`. A new head count, head size or dtype is a new size too.

    Inductor writes the thread count into a CPU kernel's C++ and sizes each thread's buffers by
    it, but does not key its on-disk cache by it (torch 2.11): a kernel built under one count
    and loaded under another writes past its buffers. So each count compiles into its own
    folder, ``threads-N`` under ``TORCHINDUCTOR_CACHE_DIR`` (default: ``graphformer-inductor``
    in the temp folder), set for the call only."""
    from torch.nn.attention.flex_attention import flex_attention

    if not threads:
        kernel = torch.compile(flex_attention)
        return lambda Q, K, V, layout, scale, bias=NO_BIAS: kernel(
            Q, K, V, bias.score_mod, block_mask=layout.block_mask, scale=scale
        )
    kernel = torch.compile(flex_attention, dynamic=False)
    root = os.environ.get(CACHE_VARIABLE) or os.path.join(tempfile.gettempdir(), "graphformer-inductor")
    folder = os.path.join(root, f"threads-{threads}")
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"

    def in_own_cache(Q, K, V, layout: FlexLayout, scale: float, bias: FlexBias = NO_BIAS):
        size = _size(threads, layout, Q.shape[1], Q.shape[3], Q.dtype, bias.kernel_key)  # Q: (1, H, padded_queries, d)
        if _would_build(size):
            raise TooManySizes(f"this process has compiled {MAX_CPU_KERNELS} CPU kernel sizes, the most it builds")
        previous = os.environ.get(CACHE_VARIABLE)
        os.environ[CACHE_VARIABLE] = folder
        try:
            with torch._dynamo.config.patch({limit: MAX_CPU_KERNELS + 8}):  # and a GPU's few
                out = kernel(Q, K, V, bias.score_mod, block_mask=layout.block_mask, scale=scale)
        finally:
            if previous is None:
                del os.environ[CACHE_VARIABLE]
            else:
                os.environ[CACHE_VARIABLE] = previous
        _BUILT.add(size)
        return out

    return in_own_cache


# Devices whose compiled kernel failed to build in this process, and why: their calls go to
# `_fallback` from then on rather than pay a failing compilation per new layout.
_FAILED: dict[str, str] = {}


def _fallback(relation: Relation, q, k, v, return_weights: bool, reason: str, bias: EdgeBias | None):
    """The same attention by the exact backends auto would take without flex, counted as fallen
    back for ``reason``."""
    from graphformer.attention import blocked
    from graphformer.catalog import BACKENDS

    flex_calls.count(flex_calls.FALLEN_BACK, reason)
    if blocked.worth_it(relation) and (bias is None or BACKENDS.entry("blocked").can(bias.capability)):
        return blocked.attend(relation, q, k, v, return_weights, **({} if bias is None else {"bias": bias}))
    return torch_ops.attend(relation, q, k, v, return_weights, bias)


def _check_runs(q, k, v, compiled: bool, bias: EdgeBias | None) -> None:
    """A one-line UserError for a call the compiled kernel cannot serve."""
    if compiled and q.dtype not in DTYPES:
        raise UserError(
            f"the flex attention backend computes in float32, bfloat16 or float16, not {q.dtype}; "
            "convert the model or choose the blocked, torch or auto backend"
        )
    if q.device.type != "cpu":
        return
    if _needs_grad(q, k, v, *learned(bias)):
        raise UserError(
            "the flex attention backend trains only on CUDA (torch's FlexAttention has no backward "
            "pass on the CPU); on the CPU choose the blocked, padded, torch or auto backend, or run "
            "flex without gradients (torch.no_grad(): evaluation, decoding)"
        )
    if compiled and not cpu_kernel_runs():
        raise UserError(
            f"the flex attention backend's CPU kernel needs torch >= 2.6 (this is {torch.__version__}) "
            "and a CPU with AVX2 (x86-64, not macOS); choose the blocked, padded, torch or auto "
            "backend here"
        )


def attend(
    relation: Relation,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    return_weights: bool = False,
    block: int | tuple[int, int] | None = None,
    compiled: bool = True,
    bias: EdgeBias | None = None,
):
    """Graph attention over the relation's edges by FlexAttention; same contract as the DGL
    backend.

    q (N_dst, H, d), k and v (N_src, H, d) -> out (N_dst, H, d) [, weights (E, H, 1) in the
    relation's edge order]. ``bias`` (from positions) is added by the kernel's score_mod. ``block``
    defaults to `default_block` of q's device; ``compiled=False`` runs FlexAttention uncompiled,
    which builds the whole padded score plane: for tests and small relations only.
    """
    _require()
    _check_runs(q, k, v, compiled, bias)
    if not torch.is_grad_enabled():  # FlexAttention refuses CPU tensors that require grad, even here
        q, k, v = q.detach(), k.detach(), v.detach()
    if relation.num_queries == 0:  # nothing to attend (an empty subgraph of active nodes)
        out = q.new_zeros(q.shape)
        return (out, q.new_zeros(relation.num_edges, q.shape[1], 1)) if return_weights else out
    if compiled and q.device.type in _FAILED:
        return _fallback(relation, q, k, v, return_weights, _FAILED[q.device.type], bias)
    layout = layout_of(
        relation, default_block(q.device) if block is None else block, compiled and q.device.type == "cpu"
    )
    Q, K, V = layout.pad_queries(q), layout.pad_keys(k), layout.pad_keys(v)
    if K.data_ptr() == Q.data_ptr() or V.data_ptr() in (Q.data_ptr(), K.data_ptr()):
        K, V = K.clone(), V.clone()  # the compiled CPU kernel refuses one buffer read as two inputs
    scale = 1.0 / math.sqrt(q.shape[-1])
    try:
        out = _run(layout, Q, K, V, scale, compiled, for_kernel(bias, relation, layout, q.dtype))
    except TooManySizes as err:
        return _fallback(relation, q, k, v, return_weights, str(err), bias)
    except Exception as err:  # noqa: BLE001 - told apart by name: Inductor is not imported here
        if not (compiled and q.device.type == "cpu" and type(err).__name__ == "InductorError"):
            raise
        _FAILED[q.device.type] = str(err).splitlines()[0] if str(err) else type(err).__name__
        warnings.warn(
            "flex: torch's compiled CPU kernel failed to build for this block layout; this process's "
            "flex calls now run on the blocked or torch backend, with the same results",
            RuntimeWarning,
            stacklevel=2,
        )
        return _fallback(relation, q, k, v, return_weights, _FAILED[q.device.type], bias)
    out = out[0].transpose(0, 1)[: relation.num_queries].contiguous()  # (N_dst, H, d), padded rows dropped
    if not return_weights:
        return out
    return out, layout.edge_weights(relation, Q, K, scale, bias)


def _run(layout: FlexLayout, Q, K, V, scale: float, compiled: bool, bias: FlexBias) -> torch.Tensor:
    """The kernel's (1, H, padded_queries, d) output, the call counted as compiled or uncompiled."""
    with warnings.catch_warnings():
        if not compiled:  # asked for: the warning says to compile
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = _kernel(compiled, Q.device.type)(Q, K, V, layout, scale, bias)
    flex_calls.count(flex_calls.COMPILED if compiled else flex_calls.UNCOMPILED)
    return out


__all__ = [
    "attend",
    "unavailable",
    "runs_on",
    "worth_it",
    "layout_of",
    "default_block",
    "FlexLayout",
    "BLOCK",
    "AUTO_DEVICES",
]
