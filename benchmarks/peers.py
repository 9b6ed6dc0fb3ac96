"""The dense peers the benchmarks compare graphformer against: the same computation as the usual
dense libraries do it, on padded tensors with masks.

* `DensePeer`: a Transformer for training on ``torch.nn.Transformer``, with `dense_loss`;
* `DenseCacheStepper`: decoding with a key/value cache over a model's weights copied into
  ``torch.nn.Transformer`` (`graphformer.model.dense.to_torch_transformer`);
* `masked_sdpa`: the attention operator as ``scaled_dot_product_attention`` with a dense mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from graphformer import make_model
from graphformer.evaluation.loss import label_smoothed_nll
from graphformer.vocab import EOS, PAD, SOS


class DensePeer(nn.Module):
    """The same Transformer on padded tensors with masks, built on torch.nn.Transformer."""

    def __init__(self, vocab: int, layers: int, d_model: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pos", make_model(vocab, d_model=d_model, heads=heads).src_embed.positions.table)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True, norm_first=True)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, src, tgt_in):
        """(batch, n) source and (batch, m) shifted target ids -> (batch, m, vocab) log-probabilities."""

        def emb(x):
            return self.embed(x) * self.d_model**0.5 + self.pos[: x.shape[1]]

        causal = torch.ones(tgt_in.shape[1], tgt_in.shape[1], dtype=torch.bool, device=tgt_in.device).triu(1)
        h = self.core(
            emb(src),
            emb(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return torch.log_softmax(self.out(h), -1)


def pad(seqs: list[list[int]], device=None) -> torch.Tensor:
    """Sequences as one (batch, longest) tensor, ``PAD`` after each."""
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs], device=device)


def dense_loss(dense: DensePeer, src, tgt, vocab: int, device=None):
    """(summed label-smoothed loss, gold count) of the dense peer on a batch, padded."""
    s = pad([x + [EOS] for x in src], device)
    tgt_in, gold = pad([[SOS] + y for y in tgt], device), pad([y + [EOS] for y in tgt], device).reshape(-1)
    logp = dense(s, tgt_in).reshape(-1, vocab)
    return label_smoothed_nll(logp, gold, 0.1), sum(len(y) + 1 for y in tgt)  # counted on the host


class DenseCacheStepper:
    """Stepper interface (step / reorder) over nn.Transformer weights with a key/value cache.

    Sentences are padded to the longest source (a key padding mask hides the padding); the batch
    keeps all its rows until search ends, as padded dense decoders do.
    """

    def __init__(self, model, dense, src: list[list[int]], k: int, max_steps: int):
        self.model, self.dense, self.heads = model, dense, model.cfg.heads
        device = next(model.parameters()).device
        n = max(len(s) for s in src) + 1
        ids = torch.tensor([s + [EOS] + [PAD] * (n - 1 - len(s)) for s in src], device=device)
        pad_mask = ids == PAD
        pos = torch.arange(n, device=device).repeat(len(src))
        memory = dense.encoder(
            model.src_embed(ids.reshape(-1), pos).view(*ids.shape, -1),
            src_key_padding_mask=pad_mask if pad_mask.any() else None,
        )
        memory = memory.repeat_interleave(k, 0)  # (hyps, n, d)
        self.memory_mask = None if not pad_mask.any() else ~pad_mask.repeat_interleave(k, 0)[:, None, None]
        self.memory_kv = []
        for layer in dense.decoder.layers:
            w, b, d = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias, model.cfg.d_model
            mk, mv = F.linear(memory, w[d:], b[d:]).chunk(2, -1)
            # Laid out head-major once per batch, as dense libraries keep them: masked attention
            # over strided views would copy them at every step.
            self.memory_kv.append((self._heads(mk).contiguous(), self._heads(mv).contiguous()))
        hyps, d_head = len(memory), model.cfg.d_model // self.heads
        # Unwritten, as the graph decoder's: a step reads the slots up to its own only.
        self.cache = memory.new_empty(len(dense.decoder.layers), 2, hyps, self.heads, max_steps, d_head)
        self.t = 0

    def _heads(self, x):  # (hyps, n, d) -> (hyps, heads, n, d_head)
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def step(self, tokens):
        """(hyps,) newest tokens -> (hyps, vocab) log-probabilities of the next."""
        t, d = self.t, self.model.cfg.d_model
        x = self.model.tgt_embed.embed(tokens, torch.full_like(tokens, t))[:, None]  # (hyps, 1, d), unchecked
        for i, layer in enumerate(self.dense.decoder.layers):
            attn = layer.self_attn
            q, k, v = (
                self._heads(z) for z in F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
            )
            self.cache[i, 0, :, :, t], self.cache[i, 1, :, :, t] = k[:, :, 0], v[:, :, 0]
            o = F.scaled_dot_product_attention(q, self.cache[i, 0, :, :, : t + 1], self.cache[i, 1, :, :, : t + 1])
            x = x + attn.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            cross = layer.multihead_attn
            q = self._heads(F.linear(layer.norm2(x), cross.in_proj_weight[:d], cross.in_proj_bias[:d]))
            o = F.scaled_dot_product_attention(q, *self.memory_kv[i], attn_mask=self.memory_mask)
            x = x + cross.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            x = x + layer.linear2(F.relu(layer.linear1(layer.norm3(x))))
        self.t += 1
        return self.model.generator(self.dense.decoder.norm(x[:, 0]))

    def reorder(self, parents):  # the filled steps only, as a cache that grows by steps holds them
        self.cache[:, :, :, :, : self.t] = self.cache[:, :, parents, :, : self.t]


def masked_sdpa(relation, q, k, v):
    """A call of ``scaled_dot_product_attention`` over ``relation``'s edges as a dense (N, N)
    boolean mask; q, k, v are (N, heads, d), the call's output (1, heads, N, d)."""
    n = relation.num_queries
    mask = torch.zeros(n, n, dtype=torch.bool, device=q.device)
    mask[relation.v, relation.u] = True
    qh, kh, vh = (t.transpose(0, 1)[None] for t in (q, k, v))  # (1, H, N, d) views
    return lambda: F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
