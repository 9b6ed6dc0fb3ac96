"""A torch bug, reproduced with torch alone: compiled FlexAttention on a CPU fails to build its
second kernel when a tensor its mask reads changes size (automatic dynamic shapes).

The mask is graphformer's (`graphformer.attention.flex_layout`): a table of bitmap slots per block
and a (slots, B, B) bitmap, read as ``bits[table[q // B, k // B], q % B, k % B]``. Two calls with
the same node count and 2, then 3 slots: the second call recompiles with the slot count symbolic.
Inductor's C++ template names its tile sizes as size arguments (``ks0``, ``ks1``, ...) and, in
the mask's code, renames the tile's ``ks1`` back to ``cur_qSplitSize`` by replacing text, which
also turns the slot count's ``ks18`` (its wrap-around of negative indices) into ``cur_qSplitSize8``:

    error: 'cur_qSplitSize8' was not declared in this scope; did you mean 'cur_qSplitSize'?

Seen with torch 2.11.0 and 2.14.1. ``--static`` compiles with ``dynamic=False`` instead (what
graphformer does on a CPU): no size is symbolic, so nothing is renamed, and both calls build.

    python -m benchmarks.flex_cpu_dynamic_shapes [--static]     (about a minute per kernel on 2 cores)

Prints one line per call and exits 1 if a call failed to build.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

B = 64  # block side


def block_mask(n: int, slots: int):
    """A BlockMask over n nodes whose diagonal blocks read bitmap slots 1 .. slots-1 (causal bits)."""
    from torch.nn.attention.flex_attention import BlockMask

    blocks = n // B
    table = torch.zeros(blocks, blocks, dtype=torch.int32)
    table[range(blocks), range(blocks)] = torch.arange(blocks, dtype=torch.int32) % (slots - 1) + 1
    bits = torch.tril(torch.ones(B, B, dtype=torch.bool)).expand(slots, B, B).clone()

    def mask_mod(b, h, q, k):
        return bits[table[q // B, k // B], q % B, k % B]

    count = torch.ones(1, 1, blocks, dtype=torch.int32)  # one key block per query block: its own
    index = torch.arange(blocks, dtype=torch.int32).view(1, 1, blocks, 1).expand(1, 1, blocks, blocks).contiguous()
    return BlockMask.from_kv_blocks(count, index, BLOCK_SIZE=B, mask_mod=mask_mod)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--static", action="store_true", help="compile with dynamic=False (the workaround)")
    args = parser.parse_args()
    from torch.nn.attention.flex_attention import flex_attention

    torch.set_num_threads(1)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="flex-cpu-bug-")  # nothing cached
    kernel = torch.compile(flex_attention, dynamic=False if args.static else None)
    failed = False
    for n, slots in ((128, 2), (128, 3)):
        q, k, v = (torch.randn(1, 1, n, 16) for _ in range(3))
        tic = time.perf_counter()
        try:
            with torch.no_grad():
                kernel(q, k, v, block_mask=block_mask(n, slots))
            outcome = "built and ran"
        except Exception as err:  # noqa: BLE001 - Inductor's error, reported by its first C++ error line
            failed = True
            errors = [line for line in str(err).splitlines() if "error:" in line]
            outcome = f"{type(err).__name__}: {(errors or [str(err)])[0].split('error: ')[-1]}"
        print(f"torch {torch.__version__}, {n} nodes, {slots} slots: {outcome} ({time.perf_counter() - tic:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
