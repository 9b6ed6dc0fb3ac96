r"""Token embeddings and positional encodings, applied per node.

    x_i = sqrt(d_model) * E[token_i] + P[pos_i]

Sinusoidal positions (Vaswani et al., 2017, section 3.5):

    P[p, 2i]   = sin(p / 10000^(2i / d_model))
    P[p, 2i+1] = cos(p / 10000^(2i / d_model))
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphformer.graphs import SPAN


def check_ids(
    ids: torch.Tensor, size: int, kind: str = "token", vocabulary: str = "vocabulary", things: str = "inputs"
) -> None:
    """ValueError naming an id of ``ids`` outside [0, size), the largest (or else the smallest);
    reads the ids' extremes on the host."""
    if not ids.numel():
        return
    low, high = torch.stack((ids.min(), ids.max())).tolist()  # one wait for the device, not two
    refuse_ids(low, high, size, kind, vocabulary, things)


def refuse_ids(
    low: int, high: int, size: int, kind: str = "token", vocabulary: str = "vocabulary", things: str = "inputs"
) -> None:
    """`check_ids`' ValueError, from the ids' extremes already read."""
    if low < 0 or high >= size:
        raise ValueError(
            f"{kind} id {high if high >= size else low} is outside the {vocabulary} (size {size}); "
            f"encode {things} with the model's own {vocabulary}"
        )


class TokenEmbedding(nn.Module):
    """(N,) token ids -> (N, d_model) vectors scaled by sqrt(d_model)."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    def check(self, tokens: torch.Tensor) -> None:
        """ValueError naming an id outside the vocabulary (reads the ids on the host)."""
        check_ids(tokens, self.table.num_embeddings)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens) * self.scale


class SinusoidalPositions(nn.Module):
    """(N,) positions -> (N, d_model) fixed sinusoids."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float64)[:, None]
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model, dtype=torch.float64)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
        self.register_buffer("table", table.float(), persistent=False)

    @property
    def max_len(self) -> int:
        return self.table.shape[0]

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


class LearnedPositions(nn.Module):
    """(N,) positions -> (N, d_model) trained vectors."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    @property
    def max_len(self) -> int:
        return self.table.num_embeddings

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table(positions)


class NoPositions(nn.Module):
    """No positional encoding: order reaches a node only through the attention graph, as it does
    with a causal pattern (``causal-window:1`` tells each token which one came just before it),
    which length-generalises where position tables do not (Kazemnejad et al., 2023)."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self._max_len = max_len  # still the longest sequence the model accepts

    @property
    def max_len(self) -> int:
        return self._max_len

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=positions.device)  # adds nothing, at every position


POSITIONS = {"sinusoidal": SinusoidalPositions, "learned": LearnedPositions, "none": NoPositions}


class Embedder(nn.Module):
    """Token embedding + positional encoding + dropout, for one side (source or target)."""

    def __init__(self, tokens: TokenEmbedding, positions: nn.Module, dropout: float):
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.dropout = nn.Dropout(dropout)

    def check(self, tokens: torch.Tensor, positions: torch.Tensor) -> None:
        """ValueError unless every token id and position has a row in the tables. Reading them
        waits for the device: done once per batch of given ids, never per decoding step."""
        if tokens.numel() and positions.numel():  # the three extremes in one read: each read waits for the device
            low, high, longest = torch.stack((tokens.min(), tokens.max(), positions.max().to(tokens.dtype))).tolist()
            refuse_ids(low, high, self.tokens.table.num_embeddings)
        else:
            self.tokens.check(tokens)
            longest = int(positions.max()) if positions.numel() else -1
        if longest >= self.positions.max_len:
            raise ValueError(
                f"sequence of length {longest + 1} is longer than the positional table "
                f"(max_len={self.positions.max_len}); shorten it or build the model with a larger max_len"
            )

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.check(tokens, positions)
        return self.embed(tokens, positions)

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``forward`` without the checks, for ids the caller made itself (search picks tokens
        from the vocabulary, and a stepper checks its positions once)."""
        x = self.tokens(tokens) + self.positions(positions).to(self.tokens.table.weight.dtype)
        return self.dropout(x) if self.training else x  # eval: dropout is the identity


def embed_source(embedder: Embedder, batch) -> torch.Tensor:
    """(N_src, d_model) inputs of the source nodes of a `graphformer.graphs.GraphBatch`.

    Token nodes get ``embedder(token, position)``. Span nodes, which a tree encoder pattern adds,
    start as the mean of the inputs of the tokens they hold (messages along the 'span' relation).
    """
    x = embedder(batch.src_tokens, batch.src_pos)
    if not batch.has_spans:
        return x
    members = batch.relation(SPAN)  # token u -> span v: mean_{u -> v} x_u, as index_add on any device
    total = x.new_zeros(x.shape).index_add(0, members.v, x[members.u])
    count = x.new_zeros(len(x)).index_add(0, members.v, x.new_ones(members.num_edges))[:, None]
    return torch.where(count > 0, total / count.clamp(min=1), x)


def make_embedder(cfg, tokens: TokenEmbedding) -> Embedder:
    """An embedder of a ModelConfig's positions and dropout over the token table ``tokens``."""
    return Embedder(tokens, POSITIONS[cfg.positions](cfg.d_model, cfg.max_len), cfg.dropout)


def make_embedders(cfg) -> tuple[Embedder, Embedder]:
    """Source and target embedders of a ModelConfig; with tie='all' they share one token table."""
    src_tokens = TokenEmbedding(cfg.src_vocab, cfg.d_model)
    tgt_tokens = src_tokens if cfg.tie == "all" else TokenEmbedding(cfg.tgt_vocab, cfg.d_model)
    return make_embedder(cfg, src_tokens), make_embedder(cfg, tgt_tokens)
