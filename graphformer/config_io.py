"""Configs saved as plain dicts (in config.json and in every checkpoint)."""
from __future__ import annotations

from dataclasses import asdict, fields


class DictConfig:
    """Mixin for dataclass configs: to a dict and back, ignoring keys a newer or older version
    does not know."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
