"""The decoding cache: each live hypothesis's decoder keys and values of its earlier target nodes.

Incremental decoding computes only the newest target node of each hypothesis; the nodes before
it serve as keys and values again at every later step, so each decoder layer's (or, for the
Universal Transformer, each ACT step's) keys and values are kept here, one slot per step:

    store[kind, depth, row, t]   (heads, d_head)    kind 0: keys, 1: values
                                                    depth:  layer (or ACT step) that wrote them
                                                    row:    live hypothesis, t: its target node

The model writes a step's keys and values as its layers run (``write(depth, k, v)``, which
returns the tables the new nodes attend over); search then moves hypotheses (``reorder``) and
lets finished ones go (``drop``). A table is the live rows' slots flattened, (rows * max_steps,
heads, d_head): target node j of row h is node ``h * max_steps + j``, so a row's keys are one
block and a causal step's edges are `graphformer.graphs.relation.Relation.of_groups`.
"""

from __future__ import annotations

import torch


class DecodingCache:
    """Keys and values of ``rows`` hypotheses' target nodes, ``depth`` slices each.

    Args:
        depth: slices per node (``model.cache_depth``: decoder layers, or ACT steps).
        rows: live hypotheses at the start.
        max_steps: most target nodes a hypothesis will have.
        heads: attention heads of each key and value.
        d_head: each head's width.
        like: a tensor whose device and dtype the cache takes (the memory's keys: under
            torch.autocast a projection gives bfloat16 or float16, as they are).

    The store is sized for the longest output allowed and left unwritten (no zeroing, no page
    touched in advance): a step attends to slots up to its own, all written, and nothing else
    reaches a result.
    """

    def __init__(self, depth: int, rows: int, max_steps: int, heads: int, d_head: int, like: torch.Tensor):
        self.store = like.new_empty((2, depth, rows, max_steps, heads, d_head))
        # Slot j of every row holds target node j, at decoder position j (<s> at 0): made once, so
        # a step's relative positions cost no allocation (`positions` is a view).
        self._positions = torch.arange(max_steps, device=like.device).repeat(rows)
        self.rows = rows
        self.steps = 0  # target nodes each row holds: the next step writes slot `steps`
        self.written = 0  # depths written in the step under way
        self.tables = self._tables()

    @property
    def depth(self) -> int:
        return self.store.shape[1]

    @property
    def max_steps(self) -> int:
        return self.store.shape[3]

    @property
    def dtype(self) -> torch.dtype:
        return self.store.dtype

    @property
    def positions(self) -> torch.Tensor:
        """(rows * max_steps,) decoder position of each node of the tables (`_tables`)."""
        return self._positions[: self.rows * self.max_steps]

    def _tables(self) -> list[list[torch.Tensor]]:
        """[kind][depth]: (rows * max_steps, heads, d_head) views of the live rows' keys and values."""
        node = self.store.shape[4:]
        return [[table[: self.rows].view((-1,) + node) for table in kind] for kind in self.store]

    def write(self, depth: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the new nodes' (rows, heads, d_head) keys and values of slice ``depth`` (written in
        order: a layer, or an ACT step, after the one before); return that slice's tables."""
        self.store[0, depth, : self.rows, self.steps] = k
        self.store[1, depth, : self.rows, self.steps] = v
        self.written = depth + 1
        return self.tables[0][depth], self.tables[1][depth]

    def blocks(self, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, steps + 1, heads, d_head) keys and values of slice ``depth`` of each live row's
        nodes, in order, the node of the step under way included (read after its ``write``)."""
        return self.store[0, depth, : self.rows, : self.steps + 1], self.store[1, depth, : self.rows, : self.steps + 1]

    def end_step(self) -> None:
        """The step's nodes are written. Slices no layer reached (every node halted before that ACT
        step) repeat the deepest written one: a halted node keeps serving its last keys and values."""
        new = self.store[:, :, : self.rows, self.steps]
        for depth in range(self.written, self.depth):
            new[:, depth] = new[:, depth - 1]
        self.steps, self.written = self.steps + 1, 0

    def reorder(self, parents: torch.Tensor, moved: torch.Tensor | None = None) -> None:
        """Row h now continues row parents[h] (h < len(parents)): its written slots are copied from
        there. ``moved``, if given, lists the rows whose parent is another row, and only those are
        copied (finding them reads ``parents`` back from the device: worth it on a CPU only)."""
        if moved is None:
            self.store[:, :, : len(parents), : self.steps] = self.store[:, :, parents, : self.steps]
        elif len(moved):
            self.store[:, :, moved, : self.steps] = self.store[:, :, parents[moved], : self.steps]

    def drop(self, rows: int) -> None:
        """Keep the first ``rows`` rows live; the others (finished hypotheses) leave the tables."""
        self.rows = rows
        self.tables = self._tables()
