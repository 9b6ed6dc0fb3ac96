"""Decoding speed: incremental graph decoding against recomputing the prefix, and against a dense peer.

Two settings, greedy and beam 5 each, every method timed in the same run (best of ``--rounds``
rounds, methods interleaved, so a busy machine slows them alike):

* fixed: a model of the copy configuration (2 layers, d_model 128) decodes 32 sentences of 20
  source tokens to exactly 50 target tokens (</s> is suppressed until the length limit).
* multi30k: the 1000 English sentences of test_2016_flickr (Moses-tokenized), decoded in the
  batches ``graphformer translate`` makes (`decoding_batches`: by source length, its default
  token budget per batch), by a model of the CPU recipe's size (``examples/multi30k/cpu.yaml``)
  with the recipe's data's vocabularies kept per side (the recipe shares one). Its weights are random, and
  a random model never chooses </s> by itself: </s> is suppressed until each sentence's length
  limit, set to its German reference's length (+1 for </s>), where search forces it. So every
  output has the length of a real translation; what the model says is noise.
  With ``--multi30k-run RUN_DIR`` the model is instead a trained run's (its best checkpoint, its
  own tokenizer and vocabulary), and every sentence stops where search takes </s>, within
  translate's limit (source length + 50): real translations, of the lengths they come out.

Methods, all running the same greedy / beam search code and required to produce the same tokens:

* graph incremental: graphformer's decoding (only the newest node of each live hypothesis is
  computed; finished hypotheses, and sentences, leave the computation), with the default ``auto``
  backend (which takes ``padded`` here) and, in the fixed setting, with ``dgl`` (``torch``
  where DGL is not installed);
* graph recompute (fixed setting only, timed once: it is slow): the whole prefix rebuilt as a
  training batch at every step (the reference);
* graph, inline step (bound) (fixed setting only): the graph decoder with its step's operations
  written out inline as the dense peer's are (`InlineStepGraphStepper`: its batch, encoder,
  cache, reorders and search are the graph decoder's; no relation, backend dispatch or node
  function per step). Not a decoder to use: the most that cutting the graph decoder's per-step
  overhead could reach where nothing ends early;
* dense KV cache: the same weights in ``torch.nn.Transformer``, decoded on padded tensors with
  the usual key/value cache (its filled steps reordered by indexing, as dense libraries do), the memory's keys and
  values laid out head-major once per batch, and PyTorch's ``scaled_dot_product_attention``; a
  batch keeps its shape until its last sentence ends.

Methods timed in the same rounds as the dense peer also get the spread of the round-by-round
ratios (``vs_dense_kv_cache_paired``: median, lowest, highest). Rows split each decoder's time into setup (batching, the encoder, the
memory's keys and values) and search (``setup_seconds``, ``search_seconds``). Fixed-setting rows
count the Python function calls, as cProfile does, to make the stepper and per search step
(``python_calls_setup``, ``python_calls_per_step``): interpreter overhead in a figure that does not
depend on the machine's speed. Multi30k rows give the total ratio that a graph search costing the
dense one's per row stepped would reach (``equal_cost_per_row_bound``): both pay the setup, which
caps the gain. They also give what a padded batch waits for: each batch's longest output
(``longest_output_per_batch``, tokens with </s>), the mean length, and how many outputs ran to
their length limit without choosing </s> (``outputs_at_their_limit``).

Per step, both decoders also pay a cost that does not shrink with the rows: reading every weight
(the generator's vocabulary x d_model matrix above all) and the per-call overheads. The Multi30k
setting times one greedy step of each decoder at 1 to all of the first batch's rows
(``multi30k step cost`` rows: ``seconds_per_step``), fits ``seconds = per_step + per_row * rows``
to each (``multi30k step cost fit``), and from the dense fit predicts both searches over the real
batches (the graph decoder steps each batch's live rows, the padded one all of them until its
longest output ends, ``predicted_search_ratio``): ``equal_cost_per_step_estimate`` is the total
ratio the graph decoder would reach if it paid exactly the dense peer's cost per step and per row.
It is below the per-row bound: a step's fixed cost is paid as often by both.

With ``--batch-budgets 1000,2000,4000,8000`` the Multi30k greedy setting is also timed at those
source-token budgets per batch, and each decoder is compared at its own best: a padded decoder
pays for the spread of output lengths, which grows with the batch, while one that drops finished
rows mostly gains from larger batches.

    python benchmarks/decoding.py [--rounds 5] [--multi30k-rounds 2] [--mirror DIR] [--multi30k-run RUN_DIR]
                                  [--batch-budgets N,N,...] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from graphformer import make_model
from graphformer.attention import unavailable
from graphformer.cli import at_least_one
from graphformer.data.batching import DECODE_BATCH_TOKENS, decoding_batches
from graphformer.decoding import DEFAULT_ALPHA, IncrementalStepper, beam_search, greedy_search, translate_ids
from graphformer.graphs import make_batch, patterns
from graphformer.model.dense import to_torch_transformer
from graphformer.vocab import EOS, PAD, UNK, Vocab

sys.path.insert(0, str(Path(__file__).parent))
from provenance import machine, versions  # noqa: E402
from recipe import MODEL_SIZES, RECIPE_MODEL  # noqa: E402

BEAMS = (1, 5)
INLINE_BOUND = "graph, inline step (bound)"  # InlineStepGraphStepper's method name
EDGEWISE = "torch" if unavailable("dgl") else "dgl"  # the edge-wise kernels: DGL's where it is installed
DEFAULT_MIRROR = "../shared/data/multi30k"
# The CPU recipe's model; random weights, so no dropout, and one table per side (the vocabularies
# below are per side).
MULTI30K_CONFIG = dict(MODEL_SIZES, max_len=RECIPE_MODEL["max_len"], dropout=0.0, tie="none")
# Vocabulary sizes of the recipe's data kept per side (Moses-tokenized Multi30k train, min count 2,
# --no-shared-vocab): the figures in docs/results.md were measured with them.
RECIPE_SRC_VOCAB, RECIPE_TGT_VOCAB = 6_194, 8_055


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
        pad = ids == PAD
        pos = torch.arange(n, device=device).repeat(len(src))
        memory = dense.encoder(
            model.src_embed(ids.reshape(-1), pos).view(*ids.shape, -1), src_key_padding_mask=pad if pad.any() else None
        )
        memory = memory.repeat_interleave(k, 0)  # (hyps, n, d)
        self.memory_mask = None if not pad.any() else ~pad.repeat_interleave(k, 0)[:, None, None]
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
        t, d = self.t, self.model.cfg.d_model
        x = self.model.tgt_embed.embed(tokens, torch.full_like(tokens, t))[:, None]  # (hyps, 1, d), unchecked
        for i, layer in enumerate(self.dense.decoder.layers):
            q, k, v = (
                self._heads(z)
                for z in F.linear(layer.norm1(x), layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias).chunk(
                    3, -1
                )
            )
            self.cache[i, 0, :, :, t], self.cache[i, 1, :, :, t] = k[:, :, 0], v[:, :, 0]
            o = F.scaled_dot_product_attention(q, self.cache[i, 0, :, :, : t + 1], self.cache[i, 1, :, :, : t + 1])
            x = x + layer.self_attn.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            attn = layer.multihead_attn
            q = self._heads(F.linear(layer.norm2(x), attn.in_proj_weight[:d], attn.in_proj_bias[:d]))
            o = F.scaled_dot_product_attention(q, *self.memory_kv[i], attn_mask=self.memory_mask)
            x = x + attn.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            x = x + layer.linear2(F.relu(layer.linear1(layer.norm3(x))))
        self.t += 1
        return self.model.generator(self.dense.decoder.norm(x[:, 0]))

    def reorder(self, parents):  # the filled steps only, as a cache that grows by steps holds them
        self.cache[:, :, :, :, : self.t] = self.cache[:, :, parents, :, : self.t]


class InlineStepGraphStepper:
    """The graph decoder with its step's abstractions taken out: a bound, not a decoder to use.

    Everything is an `IncrementalStepper`'s, held as ``graph`` (the graph batch and encoder, its
    padded memory ``memory_kv``, its `graphformer.decoding.cache.DecodingCache` of each hypothesis's keys and values as one
    block, reorders and dropped rows, search) except ``step``, whose operations are written out
    inline as the dense peer's are: no relation, no backend dispatch, no node functions or
    residual blocks, one fused attention call per sub-layer over the cache's blocks and the
    memory's, read in place. It computes what the graph step computes
    (`tests/bench/test_benchmarks.py` holds it to that). Its time against the dense peer's is
    the most the graph decoder could reach by cutting its per-step overhead alone: the bound on
    fixed lengths, where nothing ends early. For what the fixed setting decodes: a pre-norm
    Transformer, causal decoder self-attention and full cross-attention, sources of one length.
    """

    def __init__(self, model, batch, hyps_per_sentence: int, max_steps: int, pool):
        lengths = set(batch.src_lengths.tolist())
        if not (
            model.cfg.model == "transformer"
            and model.cfg.norm_first
            and pool.dec is patterns.causal
            and pool.cross_is_full
            and len(lengths) == 1
        ):
            raise ValueError(
                "the inline step covers pre-norm Transformers with causal and full attention on sources "
                "of one length (the fixed setting)"
            )
        self.graph = IncrementalStepper(model, batch, hyps_per_sentence, max_steps, pool)
        self.model, self.k, self.width = model, hyps_per_sentence, lengths.pop()
        self.device = self.graph.device

    @property
    def num_hyps(self) -> int:
        return self.graph.num_hyps

    def reorder(self, parents):
        self.graph.reorder(parents)

    def step(self, tokens):
        model, cache, n, k = self.model, self.graph.cache, self.graph.num_hyps, self.k
        x = model.tgt_embed.embed(tokens, torch.full_like(tokens, self.graph.t))
        for i, layer in enumerate(model.decoder.layers):
            attn, cross, d = layer.self_attn, layer.cross_attn, x.shape[1]
            q, key, value = (
                F.linear(layer.self_block.norm(x), attn.in_proj.weight, attn.in_proj.bias)
                .view(n, 3, attn.heads, -1)
                .unbind(1)
            )
            cache.write(i, key, value)
            keys, values = (z.transpose(1, 2) for z in cache.blocks(i))  # (n, H, t + 1, d_head)
            x = x + attn.out_proj(F.scaled_dot_product_attention(q[:, :, None], keys, values).view(n, d))
            q = F.linear(layer.cross_block.norm(x), cross.in_proj.weight[:d], cross.in_proj.bias[:d])
            q = q.view(n // k, k, cross.heads, -1).transpose(1, 2)  # (sentences, H, k, d_head)
            memory = (z.view(n // k, self.width, cross.heads, -1).transpose(1, 2) for z in self.graph.memory_kv[i])
            o = F.scaled_dot_product_attention(q, *memory).transpose(1, 2).reshape(n, d)
            x = x + cross.out_proj(o)
            x = x + layer.feed_forward.linear2(torch.relu(layer.feed_forward.linear1(layer.ff_block.norm(x))))
        cache.end_step()
        return model.generator(model.decoder.norm(x))


def search(stepper, limits, beam, drop_finished):
    if beam == 1:
        return greedy_search(stepper, limits, drop_finished=drop_finished)
    return beam_search(stepper, limits, beam, DEFAULT_ALPHA, drop_finished=drop_finished)


@torch.inference_mode()  # as translate_ids
def decode_batches(model, src, limits, beam, stepper_of, batch_tokens=DECODE_BATCH_TOKENS, clock=None):
    """Decode every batch (`decoding_batches`, as ``translate`` makes them, ``batch_tokens``
    source tokens each); outputs in input order. `translate_ids`' own loop, opened up: each method
    brings its stepper, each sentence its length limit, and the clock splits setup from search:
    ``stepper_of(chunk, beam, max_steps) -> (stepper, drop_finished)``.
    ``clock``, if given, adds the seconds spent making steppers (batching, the encoder, the
    memory's keys and values) to ``clock['setup']`` and searching to ``clock['search']``."""
    out = [None] * len(src)
    device = next(model.parameters()).device
    clock = {"setup": 0.0, "search": 0.0} if clock is None else clock
    for idx in decoding_batches([len(s) for s in src], batch_tokens):
        chunk = [src[i] for i in idx]
        lim = torch.tensor([limits[i] for i in idx], device=device)
        tic = time.perf_counter()
        stepper, drop = stepper_of(chunk, beam, int(lim.max()))
        made = time.perf_counter()
        for i, h in zip(idx, search(stepper, lim, beam, drop)):
            out[i] = h
        clock["setup"] += made - tic
        clock["search"] += time.perf_counter() - made
    return out


def graph_stepper(model, backend, stepper=IncrementalStepper):
    pool = model.make_pool()

    def make(chunk, beam, max_steps):
        model.attention_backend = backend
        batch = make_batch(pool, chunk).to(next(model.parameters()).device)
        return stepper(model, batch, beam, max_steps, pool), True

    return make


def dense_stepper(model, dense):
    return lambda chunk, beam, max_steps: (DenseCacheStepper(model, dense, chunk, beam, max_steps), False)


def dense_decode(model, dense, src, beam, limit):
    """The dense peer on ``src`` in batches by length, every output at most ``limit`` tokens."""
    return decode_batches(model, src, [limit] * len(src), beam, dense_stepper(model, dense))


def time_methods(methods: dict, rounds: int, check) -> dict:
    """Seconds of each method in each round (methods interleaved, so a round's times were taken
    side by side); ``check(name, hyps)`` sees each method's warm-up run."""
    seconds = {name: [] for name in methods}
    for name, run in methods.items():
        check(name, run())  # warm-up (graph pool, allocator) and the equality check
    for _ in range(rounds):
        for name, run in methods.items():
            tic = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - tic)
    return seconds


def best_of(seconds: dict) -> dict:
    return {name: min(times) for name, times in seconds.items()}


def paired_ratios(seconds: dict, name: str, peer: str = "dense KV cache") -> dict:
    """The peer's time over the method's, round by round: the median and the range say how far
    one ratio moves on this machine (a best-of ratio hides that)."""
    ratios = sorted(p / s for p, s in zip(seconds[peer], seconds[name]))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1], "rounds": len(ratios)}


def same_outputs():
    """``check(name, hyps)``: every method must decode the tokens the first one did;
    ``check.tokens()`` gives them."""
    first = {}

    def check(name, hyps):
        tokens = [h.tokens for h in hyps]
        first.setdefault("tokens", tokens)
        assert tokens == first["tokens"], f"{name} decoded different tokens"

    check.tokens = lambda: first["tokens"]
    return check


def rows_of(setting, beam, seconds: dict, sentences: int, tokens: int):
    """One row per method from its seconds per round (its best counts; methods timed in the same
    rounds as the dense peer also get the paired ratios' spread)."""
    rows, dense = [], seconds["dense KV cache"]
    for name, times in seconds.items():
        s = min(times)
        row = {
            "setting": setting,
            "beam": beam,
            "method": name,
            "seconds": s,
            "sentences_per_s": sentences / s,
            "tokens_per_s": tokens / s,
            "vs_dense_kv_cache": min(dense) / s,
        }
        if name != "dense KV cache" and len(times) == len(dense) > 1:
            row["vs_dense_kv_cache_paired"] = paired_ratios(seconds, name)
        backend = name[name.find("(") :]
        if name.startswith("graph incremental") and f"graph recompute {backend}" in seconds:
            row["vs_recompute"] = min(seconds[f"graph recompute {backend}"]) / s
        rows.append(row)
        spread = row.get("vs_dense_kv_cache_paired")
        print(
            f"{setting:8s} beam {beam} {name:26s} {row['sentences_per_s']:8.1f} sentences/s "
            f"{row['tokens_per_s']:9.0f} tokens/s  {row['vs_dense_kv_cache']:.2f}x dense"
            + (
                f" (paired rounds: median {spread['median']:.2f}x, {spread['min']:.2f}-{spread['max']:.2f}x)"
                if spread
                else ""
            )
        )
    return rows


def clocked_methods(model, src, limits, beam, makers: dict):
    """({name: run}, {name: [clock per run]}): each run decodes ``src`` with a fresh stepper
    maker and records its setup and search seconds (see `decode_batches`)."""
    clocks = {name: [] for name in makers}

    def method(name):
        def run():
            clocks[name].append({"setup": 0.0, "search": 0.0})
            return decode_batches(model, src, limits, beam, makers[name](), clock=clocks[name][-1])

        return run

    return {name: method(name) for name in makers}, clocks


def fastest_split(clocks: dict) -> dict:
    """Each method's setup and search seconds in its fastest timed run (the first run of each,
    `time_methods`' warm-up, is not timed, so its split is left out too)."""
    return {name: min(runs[1:], key=lambda c: c["setup"] + c["search"]) for name, runs in clocks.items()}


@torch.inference_mode()
def python_calls(make, src, limits, beam) -> dict:
    """Python function calls (as cProfile counts them: a machine-independent measure of
    interpreter overhead) to make the stepper of one batch, and per step of its search."""
    lim = torch.tensor(limits)
    profiler = cProfile.Profile()
    profiler.enable()
    stepper, drop = make(src, beam, int(lim.max()))
    profiler.disable()
    setup = pstats.Stats(profiler).total_calls
    steps = []
    original = stepper.step
    stepper.step = lambda tokens: steps.append(1) or original(tokens)  # counts the steps search takes
    profiler = cProfile.Profile()
    profiler.enable()
    search(stepper, lim, beam, drop)
    profiler.disable()
    return {"setup": setup, "per_step": (pstats.Stats(profiler).total_calls - 2 * len(steps)) / len(steps)}


FIXED_SOURCE_TOKENS, FIXED_OUTPUT_TOKENS = 20, 50  # the fixed setting: every output 49 tokens + </s>


def fixed_model_and_sources(sentences: int = 32, device: str | torch.device = "cpu"):
    """The fixed setting (also the GPU check's and the tile kernels' decoding): a model of the copy
    configuration (seed 0) that never picks </s> before the length limit, and ``sentences``
    random sources of ``FIXED_SOURCE_TOKENS`` tokens."""
    torch.manual_seed(0)
    model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.0).to(device).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # every hypothesis runs to the length limit
    rng = random.Random(0)
    return model, [[rng.randrange(4, 30) for _ in range(FIXED_SOURCE_TOKENS)] for _ in range(sentences)]


def fixed_translate(model, src, beam: int, incremental: bool = True):
    """`translate_ids` on the fixed setting: one batch, every output ``FIXED_OUTPUT_TOKENS`` long."""
    return translate_ids(
        model,
        src,
        beam=beam,
        extra_len=FIXED_OUTPUT_TOKENS - FIXED_SOURCE_TOKENS - 1,
        incremental=incremental,
        batch_tokens=sum(len(s) + 1 for s in src),
    )


def fixed_setting(rounds: int) -> list[dict]:
    model, src = fixed_model_and_sources()
    dense = to_torch_transformer(model).eval()
    limits = [FIXED_OUTPUT_TOKENS] * len(src)

    def recompute(backend):
        def run(beam):
            model.attention_backend = backend
            return fixed_translate(model, src, beam, incremental=False)

        return run

    rows = []
    for beam in BEAMS:
        makers = {f"graph incremental ({b})": (lambda b=b: graph_stepper(model, b)) for b in (EDGEWISE, "auto")}
        makers[INLINE_BOUND] = lambda: graph_stepper(model, "auto", InlineStepGraphStepper)
        makers["dense KV cache"] = lambda: dense_stepper(model, dense)
        methods, clocks = clocked_methods(model, src, limits, beam, makers)
        check = same_outputs()
        seconds = time_methods(methods, rounds, check)
        for b in (EDGEWISE, "auto"):  # the slow reference: one timed run
            tic = time.perf_counter()
            check(f"graph recompute ({b})", recompute(b)(beam))
            seconds[f"graph recompute ({b})"] = [time.perf_counter() - tic]
        split = fastest_split(clocks)
        calls = {name: python_calls(makers[name](), src, limits, beam) for name in makers}
        for row in rows_of("fixed", beam, seconds, len(src), len(src) * FIXED_OUTPUT_TOKENS):
            if row["method"] in makers:
                row.update(
                    setup_seconds=split[row["method"]]["setup"],
                    search_seconds=split[row["method"]]["search"],
                    python_calls_setup=calls[row["method"]]["setup"],
                    python_calls_per_step=calls[row["method"]]["per_step"],
                )
            rows.append(row)
        graph, bound, peer = (split[name] for name in ("graph incremental (auto)", INLINE_BOUND, "dense KV cache"))
        print(
            f"fixed beam {beam}: setup {graph['setup'] * 1e3:.1f} ms graph, {peer['setup'] * 1e3:.1f} ms dense; "
            f"search {graph['search'] * 1e3:.1f} ms, {peer['search'] * 1e3:.1f} ms (the graph decoder with an inline "
            f"step: {bound['search'] * 1e3:.1f} ms); Python calls per step "
            f"{calls['graph incremental (auto)']['per_step']:.0f} graph, {calls['dense KV cache']['per_step']:.0f} "
            "dense"
        )
    return rows


def random_length_forced_model(en: list[str], de: list[str]):
    """(model, source ids, per-sentence limits): a CPU-recipe-sized random model that never picks
    </s> before each sentence's limit, its German reference's length + 1."""
    from graphformer.data.multi30k import MosesPipeline

    src_words = [MosesPipeline("en").tokenize(x) for x in en]
    # The test sentences' own words, then unused ids up to the recipe's size (<unk> beyond it).
    words = Vocab.build(src_words)
    src = [[i if i < RECIPE_SRC_VOCAB else UNK for i in words.encode(s)] for s in src_words]
    torch.manual_seed(0)
    model = make_model(RECIPE_SRC_VOCAB, RECIPE_TGT_VOCAB, **MULTI30K_CONFIG).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # </s> only where search forces it (at the limit)
    return model, src, [len(MosesPipeline("de").tokenize(x)) + 1 for x in de]


def trained_model(run_dir: Path, en: list[str]):
    """(model, source ids, per-sentence limits) of a trained run: translate's limits, natural stops."""
    from graphformer.decoding import max_target_lengths
    from graphformer.running.loaded import LoadedRun

    run = LoadedRun(run_dir)
    tokenize, _ = run.pipelines()
    src = [run.src_vocab.encode(tokenize(x)) for x in en]
    positions = run.model.make_pool().source_positions  # a source's tokens and </s>, as a batch counts them
    limits = max_target_lengths(torch.tensor([positions(len(s)) for s in src]), run.model.cfg.max_len).tolist()
    return run.model.eval(), src, limits


def multi30k_inputs(mirror: Path, sentences: int, run_dir: Path | None = None):
    """(model, its dense peer, source ids, per-sentence limits) of the Multi30k settings: a trained
    run's model, or a random length-forced one."""
    from graphformer.data.multi30k import read_gz

    en = read_gz(mirror / "test_2016_flickr.en.gz")[:sentences]
    de = read_gz(mirror / "test_2016_flickr.de.gz")[:sentences]
    model, src, limits = trained_model(run_dir, en) if run_dir else random_length_forced_model(en, de)
    return model, to_torch_transformer(model).eval(), src, limits


STEP_COST_ROWS = (1, 16, 64, 128, 256)  # and all of the first batch's rows


@torch.inference_mode()
def step_seconds(make, chunk, device, prefix: int = 10, steps: int = 8) -> float:
    """Seconds of one greedy step over all of ``chunk``'s sentences, after ``prefix`` steps
    (attention then spans a translation's usual prefix); ``make(chunk, beam, max_steps)`` makes the
    stepper."""
    stepper, _ = make(chunk, 1, prefix + steps)
    tokens = torch.full((len(chunk),), UNK, device=device)
    for _ in range(prefix):
        stepper.step(tokens)
    tic = time.perf_counter()
    for _ in range(steps):
        stepper.step(tokens)
    return (time.perf_counter() - tic) / steps


def step_cost_setting(rounds: int, inputs) -> tuple[list[dict], dict]:
    """(rows, {method: (per_step, per_row)}): each decoder's greedy step timed at several row
    counts (the first translate batch's first sentences; every count and decoder once per round,
    the best round counts) and a line fitted to each."""
    model, dense, src, _ = inputs
    first = [src[i] for i in decoding_batches([len(s) for s in src])[0]]
    counts = sorted({n for n in STEP_COST_ROWS if n < len(first)} | {len(first)})
    makers = {"graph incremental (auto)": graph_stepper(model, "auto"), "dense KV cache": dense_stepper(model, dense)}
    device = next(model.parameters()).device
    seconds = {(name, n): float("inf") for n in counts for name in makers}
    for _ in range(rounds):
        for name, n in seconds:
            seconds[name, n] = min(seconds[name, n], step_seconds(makers[name], first[:n], device))
    rows = [
        {"setting": "multi30k step cost", "beam": 1, "method": name, "rows": n, "seconds_per_step": s}
        for (name, n), s in seconds.items()
    ]
    fits = {}
    for name in makers if len(counts) > 1 else ():  # a line needs two row counts (a batch of one sentence has one)
        fit = statistics.linear_regression(counts, [seconds[name, n] for n in counts])
        fits[name] = (fit.intercept, fit.slope)
        rows.append(
            {
                "setting": "multi30k step cost fit",
                "beam": 1,
                "method": name,
                "seconds_per_step": fit.intercept,
                "seconds_per_row": fit.slope,
            }
        )
    for n in counts:
        g, d = seconds["graph incremental (auto)", n], seconds["dense KV cache", n]
        print(f"multi30k greedy step at {n:4d} rows: graph {g * 1e3:7.2f} ms, dense {d * 1e3:7.2f} ms ({d / g:.2f}x)")
    for name, (per_step, per_row) in fits.items():
        print(f"  {name}: {per_step * 1e3:.2f} ms per step + {per_row * 1e6:.1f} us per row")
    return rows, fits


def predicted_searches(cost: tuple[float, float], batches: list[list[int]], lengths: list[int]) -> tuple[float, float]:
    """(graph, padded) greedy search seconds at ``cost`` = (per step, per row): a graph decoder
    steps each batch's live rows (output i, </s> included, is live for lengths[i] steps); a padded
    one steps every row of a batch until its longest output ends."""
    per_step, per_row = cost
    graph = padded = 0.0
    for idx in batches:
        ends = [lengths[i] for i in idx]
        longest = max(ends)
        graph += longest * per_step + per_row * sum(ends)
        padded += longest * (per_step + per_row * len(idx))
    return graph, padded


def multi30k_setting(rounds: int, inputs, step_cost: tuple[float, float] | None = None) -> list[dict]:
    """``step_cost``: the dense peer's fitted (per step, per row) greedy step cost, for
    ``equal_cost_per_step_estimate``."""
    model, dense, src, limits = inputs
    batches = decoding_batches([len(s) for s in src])
    print(f"multi30k: {len(batches)} batches of {min(map(len, batches))}-{max(map(len, batches))} sentences")
    rows = []
    for beam in BEAMS:  # the default backend only: the dgl one is timed in the fixed setting
        makers = {
            "graph incremental (auto)": lambda: graph_stepper(model, "auto"),
            "dense KV cache": lambda: dense_stepper(model, dense),
        }
        methods, clocks = clocked_methods(model, src, limits, beam, makers)
        check = same_outputs()
        seconds = time_methods(methods, rounds, check)
        lengths = [len(tokens) + 1 for tokens in check.tokens()]  # each output and its </s>
        # What a padded batch waits for: its longest output, and outputs stopped only by their limit.
        longest = [max(lengths[i] for i in idx) for idx in batches]
        padded = sum(len(idx) * most for idx, most in zip(batches, longest))
        at_limit = sum(length >= limit for length, limit in zip(lengths, limits))
        padding = padded / sum(lengths)  # the most dropping finished rows can gain at equal cost per row
        split = fastest_split(clocks)
        graph_split, dense_split = split["graph incremental (auto)"], split["dense KV cache"]
        # The total if the graph decoder's search cost the dense peer's per row, for the rows it steps:
        bound = (dense_split["setup"] + dense_split["search"]) / (
            graph_split["setup"] + dense_split["search"] / padding
        )
        print(
            f"multi30k beam {beam}: a padded batch steps {padding:.2f}x the rows a graph decoder steps; "
            f"setup (batching, encoder, memory) {graph_split['setup']:.2f} s graph, {dense_split['setup']:.2f} s "
            f"dense; search {dense_split['search'] / graph_split['search']:.2f}x; at equal cost per row the total "
            f"could reach {bound:.2f}x"
        )
        extra = {}
        if beam == 1 and step_cost is not None:
            graph_pred, dense_pred = predicted_searches(step_cost, batches, lengths)
            # The fit gives the ratio of the two searches; the measured dense search sets the scale
            # (the fit's own times were taken at another moment of a noisy run).
            estimate = (dense_split["setup"] + dense_split["search"]) / (
                graph_split["setup"] + dense_split["search"] * graph_pred / dense_pred
            )
            extra = {"equal_cost_per_step_estimate": estimate, "predicted_search_ratio": dense_pred / graph_pred}
            print(
                f"  with the dense peer's cost per step and per row, the graph search would be about "
                f"{dense_pred / graph_pred:.2f}x the dense one and the total {estimate:.2f}x"
            )
        for row in rows_of("multi30k", beam, seconds, len(src), sum(lengths)):
            mine = split[row["method"]]
            rows.append(
                {
                    **row,
                    "padded_over_live_row_steps": padding,
                    "setup_seconds": mine["setup"],
                    "search_seconds": mine["search"],
                    "search_vs_dense_kv_cache": dense_split["search"] / mine["search"],
                    "equal_cost_per_row_bound": bound,
                    **extra,
                    "batch_sizes": [len(idx) for idx in batches],
                    "longest_output_per_batch": longest,
                    "mean_output_length": sum(lengths) / len(lengths),
                    "outputs_at_their_limit": at_limit,
                }
            )
    return rows


def batch_budget_setting(rounds: int, inputs, budgets: list[int]) -> list[dict]:
    """Multi30k greedy decoding at several batch budgets: each decoder's best budget, since a
    padded decoder and one that drops finished rows do not gain alike from larger batches."""
    model, dense, src, limits = inputs
    steppers = {
        "graph incremental (auto)": lambda: graph_stepper(model, "auto"),  # a fresh graph pool per run
        "dense KV cache": lambda: dense_stepper(model, dense),
    }
    runs = {
        (method, tokens): (lambda make=make, t=tokens: decode_batches(model, src, limits, 1, make(), t))
        for tokens in budgets
        for method, make in steppers.items()
    }
    seconds = best_of(time_methods(runs, rounds, same_outputs()))
    rows = [
        {
            "setting": "multi30k batch budgets",
            "beam": 1,
            "method": method,
            "batch_tokens": tokens,
            "seconds": s,
            "sentences_per_s": len(src) / s,
        }
        for (method, tokens), s in seconds.items()
    ]
    best = {m: min((r for r in rows if r["method"] == m), key=lambda r: r["seconds"]) for m in steppers}
    graph, dense_best = best["graph incremental (auto)"], best["dense KV cache"]
    print(
        f"multi30k greedy, each decoder at its best batch budget: graph @{graph['batch_tokens']} "
        f"{dense_best['seconds'] / graph['seconds']:.2f}x dense @{dense_best['batch_tokens']}"
    )
    for r in rows:
        r["vs_best_dense"] = dense_best["seconds"] / r["seconds"]
        print(
            f"  {r['method']:26s} @{r['batch_tokens']:6d} {r['sentences_per_s']:8.1f} sentences/s "
            f"{r['vs_best_dense']:.2f}x the best dense"
        )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=at_least_one, default=5, help="timed rounds per method (the best counts)")
    parser.add_argument("--multi30k-rounds", type=at_least_one, default=2, help="timed rounds in the multi30k setting")
    parser.add_argument(
        "--mirror",
        default=DEFAULT_MIRROR,
        help="Multi30k raw files (without them, and unless "
        "--mirror or --multi30k-run is given, the multi30k setting is skipped)",
    )
    parser.add_argument("--multi30k-sentences", type=at_least_one, default=1000)
    parser.add_argument(
        "--multi30k-run",
        type=Path,
        metavar="RUN_DIR",
        help="decode with this trained Multi30k run's best model (natural stops) instead of a "
        "random, length-forced one",
    )
    parser.add_argument(
        "--batch-budgets",
        type=lambda text: [int(x) for x in text.split(",")],
        metavar="N,N,...",
        help="also time Multi30k greedy decoding at these source-token budgets per batch, so each "
        "decoder can be compared at its best (e.g. 1000,2000,4000,8000)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    mirror = Path(args.mirror)
    have_multi30k = (mirror / "test_2016_flickr.en.gz").is_file()
    if not have_multi30k and (args.multi30k_run or args.mirror != DEFAULT_MIRROR):  # asked for, not there
        parser.error(
            f"no Multi30k files in {mirror} (test_2016_flickr.en.gz); give --mirror the folder that holds them"
        )
    if args.multi30k_run:  # before the fixed setting's minutes, not after
        from graphformer.errors import UserError
        from graphformer.training.run_dir import find_checkpoint

        try:
            find_checkpoint(args.multi30k_run, "best")
        except UserError as err:
            parser.error(f"--multi30k-run: {err}")
    rows = fixed_setting(args.rounds)
    if have_multi30k:
        inputs = multi30k_inputs(mirror, args.multi30k_sentences, args.multi30k_run)
        cost_rows, fits = step_cost_setting(args.rounds, inputs)
        rows += multi30k_setting(args.multi30k_rounds, inputs, fits.get("dense KV cache")) + cost_rows
        if args.batch_budgets:
            rows += batch_budget_setting(args.multi30k_rounds, inputs, args.batch_budgets)
    else:
        print(f"no Multi30k files in {mirror}: skipping the multi30k setting (pass --mirror DIR)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "command": f"python benchmarks/decoding.py --rounds {args.rounds} --multi30k-rounds "
        f"{args.multi30k_rounds} --mirror {args.mirror} "
        f"--multi30k-sentences {args.multi30k_sentences}"
        + (f" --multi30k-run {args.multi30k_run}" if args.multi30k_run else "")
        + (f" --batch-budgets {','.join(map(str, args.batch_budgets))}" if args.batch_budgets else ""),
        "settings": {
            "fixed": "copy model (2 layers, d_model 128), 32 sentences of 20 tokens, 50 target tokens each, one batch",
            "multi30k": f"{args.multi30k_sentences} test_2016_flickr sentences, batches as "
            f"translate makes them ({DECODE_BATCH_TOKENS} source tokens, by "
            "length), "
            + (
                "the trained run's best model, natural stops"
                if args.multi30k_run
                else "CPU-recipe-sized random model, each output as long as its German reference (+</s>)"
            ),
        },
        "rows": rows,
        "machine": machine(),
        "versions": versions(),
    }
    (out / "decoding.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'decoding.json'}")


if __name__ == "__main__":
    main()
