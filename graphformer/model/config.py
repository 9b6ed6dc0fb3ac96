"""Hyper-parameters of the graph models, checked on construction and saved with every checkpoint."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from graphformer.config_io import DictConfig
from graphformer.graphs import GraphPool
from graphformer.model.embedding import POSITIONS

TYING = ("none", "decoder", "all")
MODELS = ("transformer", "universal")


@dataclass
class ModelConfig(DictConfig):
    """Hyper-parameters of a :class:`~graphformer.model.GraphTransformer` or a
    :class:`~graphformer.model.universal.UniversalTransformer` (saved with every checkpoint).

    tie: 'none'; 'decoder' shares the target embedding with the generator; 'all' also shares
    the source embedding (needs one vocabulary for both sides).
    """

    src_vocab: int
    tgt_vocab: int
    layers: int = 6
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    norm_first: bool = True
    positions: str = "sinusoidal"
    max_len: int = 512
    tie: str = "none"
    enc_attention: str = "full"       # attention patterns (graphformer.graphs.patterns syntax)
    dec_attention: str = "causal"
    cross_attention: str = "full"
    model: str = "transformer"        # or "universal": one shared layer per side with ACT
    max_depth: Optional[int] = None   # universal only (default 8): most steps per token
    act_threshold: Optional[float] = None  # universal only (default 0.99): halt when sum p > it
    ponder_weight: Optional[float] = None  # universal only (default 0.01): weight of the ponder cost

    def __post_init__(self):
        if self.layers < 1:
            raise ValueError(f"layers must be at least 1, got {self.layers}")
        if min(self.d_model, self.heads, self.d_ff, self.max_len) < 1:
            raise ValueError("d_model, heads, d_ff and max_len must be positive")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by the number of heads ({self.heads})")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for positional encodings, got {self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.positions not in POSITIONS:
            raise ValueError(f"unknown positions {self.positions!r}; choose one of {sorted(POSITIONS)}")
        if self.tie not in TYING:
            raise ValueError(f"unknown tie {self.tie!r}; choose one of {TYING}")
        if self.tie == "all" and self.src_vocab != self.tgt_vocab:
            raise ValueError("tie='all' needs one vocabulary for source and target (equal sizes)")
        self.graph_pool()  # parses and checks the attention patterns: fails early, with their own message
        act = {"max_depth": 8, "act_threshold": 0.99, "ponder_weight": 0.01}
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {MODELS}")
        if self.model == "transformer":
            given = [name for name in act if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} apply only to the universal model (model='universal')")
            return
        for name, default in act.items():
            if getattr(self, name) is None:
                setattr(self, name, default)
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {self.max_depth}")
        if not 0.0 < self.act_threshold <= 1.0:
            raise ValueError(f"act_threshold must be in (0, 1], got {self.act_threshold}")
        if self.ponder_weight < 0:
            raise ValueError(f"ponder_weight must be at least 0, got {self.ponder_weight}")

    def graph_pool(self) -> GraphPool:
        """A graph pool with these attention patterns."""
        return GraphPool(self.enc_attention, self.dec_attention, self.cross_attention)
