"""Configs as dataclasses whose fields carry everything said about an option.

Each field of a config is declared once with `option`: its default, its help text, its
choices and its valid range. From that one declaration come

* the check of a value (``DictConfig.check``: finite numbers, ranges, choices), run whenever a
  config is made, by the library and the command line alike;
* the command-line option (`graphformer.cli.parser` builds its parser from the fields);
* the saved form (``to_dict`` / ``from_dict``, in ``config.json`` and every checkpoint).

This module imports neither torch nor DGL, so ``graphformer --help`` stays fast.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Optional

from graphformer.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class Range:
    """Bounds of a number: ``low <= x`` (``low < x`` if ``open_low``), and the same for ``high``."""

    low: Optional[float] = None
    high: Optional[float] = None
    open_low: bool = False
    open_high: bool = False

    def describe(self) -> str:
        parts = []
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            parts.append(("above " if self.open_low else "at least ") + f"{self.low:g}")
        if self.high is not None:
            parts.append(("below " if self.open_high else "at most ") + f"{self.high:g}")
        return " and ".join(parts)

    def holds(self, x: float) -> bool:
        if self.low is not None and (x <= self.low if self.open_low else x < self.low):
            return False
        return not (self.high is not None and (x >= self.high if self.open_high else x > self.high))


AT_LEAST_1 = Range(low=1)
POSITIVE = Range(low=0, open_low=True)
NON_NEGATIVE = Range(low=0)
PROBABILITY = Range(low=0, high=1, open_high=True)  # [0, 1): dropout, label smoothing


def option(
    default: Any = MISSING,
    help: str | Callable[[], str] = "",
    *,
    choices: Collection[str] | None = None,
    range: Range | None = None,
    cli: bool = True,
    metavar: str | None = None,
):
    """A dataclass field that knows its help text, choices and range (see the module docstring).

    ``help`` may be a function of no arguments, called when ``--help`` is built (a list of
    registry entries, a plugin's among them); ``choices`` any collection of names, such as a
    registry's live `graphformer.registry.Names`. ``cli=False`` keeps a field off the command
    line (vocabulary sizes, say, which training fills in from the data).
    """
    meta = {"help": help, "choices": choices, "range": range, "cli": cli, "metavar": metavar}
    return field(default=default, metadata=meta)


def _as_kind(name: str, annotation: str, value):
    """``value`` as the kind its field's annotation names (the annotations are strings here), or a
    ConfigError: a config file can say ``layers: two``. What is that kind in substance is taken
    as it: 2.0 or a NumPy integer as a whole number, 0 and 1 as false and true. No bool is a
    number. Annotations other than int, float, bool and str are not checked."""
    kind = annotation.removeprefix("Optional[").removesuffix("]")
    if kind == "bool":
        if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
            return bool(value)
        raise ConfigError(name, f"must be true or false, got {value!r}")
    if kind in ("int", "float"):
        whole = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or (kind == "int" and not whole):
            quoted = " (text: write the number without quotes)" if isinstance(value, str) else ""
            raise ConfigError(
                name, f"must be {'a whole number' if kind == 'int' else 'a number'}, got {value!r}{quoted}"
            )
        return int(value) if kind == "int" else value
    if kind == "str" and not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got {value!r}")
    return value


class DictConfig:
    """Mixin for dataclass configs: checked on creation, saved as a dict and read back."""

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Every field read as its declared kind (see `_as_kind`), then against its declared
        choices and range; numbers must be finite."""
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if value is None:
                continue
            value = _as_kind(f.name, f.type, value)
            setattr(self, f.name, value)
            choices = meta.get("choices")
            if choices and value not in choices:
                hint = did_you_mean(value, choices) if isinstance(value, str) else ""
                raise ConfigError(f.name, f"must be one of {', '.join(map(str, choices))}, got {value!r}{hint}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                raise ConfigError(f.name, f"must be a finite number, got {value}")
            bounds = meta.get("range")
            if bounds is not None and not bounds.holds(value):
                raise ConfigError(f.name, f"must be {bounds.describe()}, got {value:g}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, strict: bool = False):
        """A config from a saved dict. Keys this version does not know are dropped (an older or
        newer run), or with ``strict`` (a file the user wrote) reported as an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if strict and unknown:
            hint = did_you_mean(str(unknown[0]), known)
            raise ConfigError(
                unknown[0], f"is not an option of {cls.__name__}{hint}; known: {', '.join(sorted(known))}"
            )
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def defaults(cls) -> dict:
        return {f.name: f.default for f in fields(cls) if f.default is not MISSING}
