"""How the flex backend served this process's calls: by the compiled kernel, uncompiled, or by
another backend where the compiled kernel could not serve them (and why).

The results are the same either way (the stand-ins are exact), so nothing in them shows which
ran; these counts do. They are per process, kept from its start: a command reads them before and
after its work (`snapshot`, `since`) and says what it saw (`report`). Training's metrics hold
each epoch's validation calls (`graphformer.evaluation.scores.evaluate` counts its own), not
those of the training steps, which only the command's last line counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

COMPILED, UNCOMPILED, FALLEN_BACK = "compiled", "uncompiled", "fallen_back"


@dataclass(frozen=True)
class FlexCalls:
    """Counts of flex calls: ``compiled`` (torch.compile's kernel), ``uncompiled`` (FlexAttention
    run eagerly: ``compiled=False``, for tests), and ``fallen_back``: handed to the blocked or
    torch backend, by reason (the first line of the build error, or the kernel-size limit)."""

    compiled: int = 0
    uncompiled: int = 0
    fallen_back: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.compiled + self.uncompiled + sum(self.fallen_back.values())

    def as_metrics(self) -> dict:
        """Flat numbers for metrics.jsonl and ``evaluate --json``: calls compiled and fallen back
        (with the commonest reason, where any did), and uncompiled ones where there were any."""
        reasons = self.fallen_back.most_common(1)
        return {
            "flex_compiled": self.compiled,
            **({"flex_uncompiled": self.uncompiled} if self.uncompiled else {}),
            "flex_fallen_back": sum(self.fallen_back.values()),
            **({"flex_fallback_reason": reasons[0][0]} if reasons else {}),
        }


_counts = {COMPILED: 0, UNCOMPILED: 0}
_fallen_back: Counter = Counter()


def count(outcome: str, reason: str | None = None) -> None:
    """Count one call that ran ``outcome`` (COMPILED, UNCOMPILED, or FALLEN_BACK with its ``reason``)."""
    if outcome == FALLEN_BACK:
        _fallen_back[reason or "unknown"] += 1
    else:
        _counts[outcome] += 1


def snapshot() -> FlexCalls:
    """The process's counts so far."""
    return FlexCalls(_counts[COMPILED], _counts[UNCOMPILED], Counter(_fallen_back))


def since(before: FlexCalls) -> FlexCalls:
    """The calls counted after ``before`` (a `snapshot`)."""
    now = snapshot()
    return FlexCalls(
        now.compiled - before.compiled, now.uncompiled - before.uncompiled, now.fallen_back - before.fallen_back
    )


def worth_saying(backend: str, calls: FlexCalls) -> bool:
    """Whether a command tells its user how flex served it: the user chose ``flex``, or ``auto`` used it."""
    return backend == "flex" or calls.total > 0


def summary(calls: FlexCalls) -> str:
    """One line for the end of a command, e.g. ``flex attention: 40 of 52 calls ran compiled; 12 ran
    on blocked/torch, with the same results (12: CppCompileError: ...)``."""
    fallen = sum(calls.fallen_back.values())
    line = f"flex attention: {calls.compiled} of {calls.total} call{'s' if calls.total != 1 else ''} ran compiled"
    if calls.uncompiled:
        line += f", {calls.uncompiled} uncompiled"
    if fallen:
        reasons = "; ".join(f"{n}: {why}" for why, n in calls.fallen_back.most_common())
        line += f"; {fallen} ran on blocked/torch, with the same results ({reasons})"
    return line


def report(backend: str, before: FlexCalls, file: TextIO) -> None:
    """Write the line that ends a command whose user chose ``flex`` or whose ``auto`` used it (see
    `worth_saying`) to ``file``: how the flex calls since ``before`` (a `snapshot`) were served."""
    calls = since(before)
    if worth_saying(backend, calls):
        print(summary(calls), file=file)
