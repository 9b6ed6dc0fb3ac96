"""The training loop: batches -> loss -> Adam + Noam, with validation, checkpoints and resume.

Resuming is exact: the batch order of an epoch is a function of (seed, epoch) only, and a
checkpoint stores the RNG states, optimizer, schedule and the position inside the epoch, so a
run stopped after k steps and resumed computes the same losses as one that never stopped.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from graphformer.attention import check_backend_trains
from graphformer.errors import ConfigError, UserError
from graphformer.evaluation.loss import NonFiniteLoss, label_smoothed_nll
from graphformer.evaluation.scores import evaluate
from graphformer.files import WriteRefused, write_json_atomic
from graphformer.graphs import make_batch
from graphformer.model import ModelConfig
from graphformer.precision import autocast, warn_if_emulated
from graphformer.training import distributed, random_states
from graphformer.training.config import SELECT_BY, TrainConfig
from graphformer.training.interrupts import StopRequest, raise_keyboard_interrupt
from graphformer.training.report import ConsoleReport, TensorBoardLog, format_metrics
from graphformer.training.run_dir import LAST, METRICS, RANKS, STEPS, TENSORBOARD, RunClaim, RunDir, resume_command
from graphformer.training.schedule import make_optimizer
from graphformer.training.start import RunState, resume_run, start_run, warn_about_generated_data
from graphformer.training.steps import check_epoch_has_steps, epoch_plan, step_counts
from graphformer.training.threads import use_threads


class EpochEnd(enum.Enum):
    """How an epoch's steps ended."""

    COMPLETE = "every step ran: validate, then go on"
    STOPPED = "a limit or a signal stopped it mid-epoch (checkpoint written)"
    LAST_STEP_STOPS = "--max-steps or --max-minutes ran out on its last step: validate, then stop"


class Trainer:
    """Trains a model in a run directory, which it holds locked while it writes there.

    ``model_cfg`` and ``train_cfg`` describe a new run; with ``resume=True`` they are the run's
    saved configuration (``graphformer.training.config.resume_config`` says what may change)
    and training continues from ``checkpoint_last.pt``. ``fit_max_len``: a new run's max_len is
    the default, not the user's choice, so it grows to the data's longest sample (`fitted_max_len`);
    a max_len the user gave that is too short stays an error.

    ``abort`` is what a second Ctrl-C does: by default it raises KeyboardInterrupt for the caller
    (a notebook, say) to handle; the command line ends the process at once instead.
    """

    def __init__(
        self,
        run_dir: str | Path,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        resume: bool = False,
        show_progress: bool = True,
        abort: Callable[[], None] | None = None,
        fit_max_len: bool = False,
        recorder=None,
    ):
        if train_cfg.viz_every and recorder is None:
            raise ConfigError(
                "viz_every",
                "records attention maps through a recorder: give Trainer(..., recorder="
                "graphformer.viz.recording.AttentionRecorder()) (the command line does)",
            )
        self.recorder = recorder  # draws and writes attention maps: viz stands above training
        self.files = RunDir(run_dir)
        self.run_dir = self.files.path
        self.ctx = distributed.setup(train_cfg.device)
        self.cfg = dataclasses.replace(train_cfg, threads=use_threads(train_cfg.threads))
        # The context of every training step's forward pass, made once (made here, a GPU without
        # bfloat16 is refused before anything is written); entered again at each batch.
        self.step_precision = autocast(self.cfg.precision, self.ctx.device)
        check_backend_trains(self.cfg.attention_backend, self.ctx.device)
        if self.ctx.is_main:
            warn_if_emulated(self.cfg.precision, self.ctx.device)
        self.show_progress = show_progress and self.ctx.is_main
        self.board = None  # TensorBoardLog once the run directory is open, with cfg.tensorboard
        self.stop = StopRequest(abort or raise_keyboard_interrupt, announce=self.ctx.is_main)
        self._deadline = None  # perf_counter() time at which max_minutes runs out (set by train)
        self.interrupted = False  # set once a Ctrl-C stopped training (with a checkpoint written)
        claim = RunClaim(self.files, self.ctx.is_main)
        try:
            if resume:
                run = resume_run(claim, self.ctx, self.cfg)
            else:
                run = start_run(claim, self.ctx, self.cfg, model_cfg, recorder, fit_max_len)
            self._take(run)
        except BaseException:
            claim.give_back()  # a refused start leaves no half-made run behind, a refused resume the run as it was
            raise

    def _take(self, run: RunState) -> None:
        """Train ``run``: its optimizer (restored when resumed), random states and logs."""
        self.splits, self.src_vocab, self.tgt_vocab = run.splits, run.src_vocab, run.tgt_vocab
        self.model, self.progress = run.model, run.progress
        self.pool = self.model.make_pool()
        self._build_optimizer()
        if run.resumed_from is None:
            self._open_board()
            if self.ctx.is_main:
                warn_about_generated_data(self.cfg, self.run_dir)
            return
        self.optimizer.load_state_dict(run.resumed_from["optimizer"])
        self.schedule.load_state_dict(run.resumed_from["schedule"])
        random_states.restore(run.resumed_from["rng"], self.ctx)
        self._check_epoch_has_steps()
        self._open_board()
        if self.ctx.is_main:
            self.files.cut_logs(self.progress.step, self.progress.epoch)
            self.files.write_config(self.model.cfg, self.cfg)  # how long it trains may have changed

    def _open_board(self) -> None:
        """TensorBoard's log, once the run directory holds no earlier run's records; a resumed
        run's drops what was logged after its checkpoint (as `RunDir.cut_logs` does)."""
        if self.ctx.is_main and self.cfg.tensorboard:
            self.board = TensorBoardLog(self.run_dir / TENSORBOARD, after_step=self.progress.step)

    def _build_optimizer(self):
        self.model.to(self.ctx.device)
        self.net = self.model
        if self.ctx.distributed:
            ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer, self.schedule = make_optimizer(
            self.model.parameters(), self.model.cfg.d_model, self.cfg.warmup, self.cfg.lr_factor
        )

    # ---- checkpoints ------------------------------------------------------------------------
    def state(self, rng_by_rank: dict | None = None) -> dict:
        """What a checkpoint holds; ``rng_by_rank``: every rank's own random states (`random_states.by_rank`),
        by default this process's alone."""
        return {
            "model_config": self.model.cfg.to_dict(),
            "train_config": self.cfg.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            # "torch" (rank 0's CPU state) is what graphformer read before the states by rank.
            "rng": {
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                **(rng_by_rank or random_states.by_rank(self.ctx, gather=False)),
            },
            "vocab": {"src": self.src_vocab.itos, "tgt": self.tgt_vocab.itos},
            "progress": self.progress.to_dict(),
            "processes": self.ctx.world,  # an epoch's batches are split among them (see epoch_plan)
        }

    def save(self, best: bool = False, keep_epoch: int | None = None):
        """Write the last checkpoint (and the best one with ``best``, and first the epoch's own with
        ``keep_epoch``: a kill between the two then resumes from before that epoch). Every rank
        calls it, since each one's random states go in; rank 0 writes."""
        rng_by_rank = random_states.by_rank(self.ctx)
        if not self.ctx.is_main:
            return
        state = self.state(rng_by_rank)
        if keep_epoch is not None:
            self.files.keep_epoch_checkpoint(state, keep_epoch, self.cfg.keep_last)
        self.files.save_checkpoint(state, best)

    # ---- the loop ---------------------------------------------------------------------------
    def _check_epoch_has_steps(self, steps: list | None = None) -> None:
        """Checked at the start, and again by each epoch, which plans its own batches."""
        if steps is None:
            steps, _ = self.epoch_plan(self.progress.epoch)
        check_epoch_has_steps(steps, self.cfg.accumulate, self.ctx.world)

    def epoch_plan(self, epoch: int):
        """This rank's and all ranks' batches of each step of ``epoch`` (`steps.epoch_plan`)."""
        return epoch_plan(self.splits["train"], self.cfg, self.ctx, epoch)

    def step_counts(self, step_batches: list[list[int]]) -> dict:
        """What a step's loss is averaged over, and the tokens it reads (`steps.step_counts`)."""
        return step_counts(self.splits["train"], self.pool, step_batches)

    def train_step(self, batches: list[list[int]], counts: dict) -> float:
        """One optimizer step over this rank's ``batches``; returns the summed loss of all ranks.

        Each micro-batch's loss is divided by the gold count of the whole step across all ranks,
        and the Universal Transformer's ponder cost by each side's node count (``counts``, see
        `step_counts`), and both are multiplied by the world size, since DDP averages gradients over
        ranks: the update equals one on the union of all batches in a single process. A step whose
        loss is not finite is not applied: training stops with the weights from before it.
        """
        train, global_tokens = self.splits["train"], counts["gold"]
        self.net.train()
        total = torch.zeros((), dtype=torch.float64, device=self.ctx.device)  # read once per step, not per batch
        for i, idx in enumerate(batches):
            src, tgt, edges = [train.src[j] for j in idx], [train.tgt[j] for j in idx], train.edges_of(idx)
            batch = make_batch(self.pool, src, tgt, edges).to(self.ctx.device)
            sync = nullcontext() if (i == len(batches) - 1 or not self.ctx.distributed) else self.net.no_sync()
            with sync:
                with self.step_precision:  # the backward pass follows the forward's dtypes
                    output = self.net(batch, full_output=True)
                    loss = label_smoothed_nll(output.log_probs, batch.gold, self.cfg.label_smoothing)
                    objective = loss * (self.ctx.world / global_tokens)
                    if output.stats:  # the universal models' ponder cost, this batch's share of the step's
                        objective = objective + output.aux_loss_over(counts) * self.ctx.world
                objective.backward()
            total = total + loss.detach().double()  # float64 sums, as Python's floats gave
        total = distributed.all_reduce_sum(float(total), self.ctx)
        if not math.isfinite(total):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(total)
        if self.cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def train(self) -> dict | None:
        """Train until cfg.epochs (or cfg.max_steps); returns the last validation metrics."""
        with self.stop.installed():
            try:
                return self._train_epochs()
            except WriteRefused as err:  # every file written before is whole: say how to go on from them
                raise WriteRefused(err.path, err.error, self._how_to_go_on()) from None

    def _train_epochs(self) -> dict | None:
        metrics = None
        if self.progress.batch and self.progress.batch == len(self.epoch_plan(self.progress.epoch)[0]):
            metrics = self._end_epoch()  # stopped (a signal, a kill) after its last step: validate it now
        # A resumed run that had stopped early stays stopped unless it is given more patience.
        done = (self.cfg.max_steps is not None and self.progress.step >= self.cfg.max_steps) or self._out_of_patience()
        if self.cfg.max_minutes is not None:
            self._deadline = time.perf_counter() + 60 * self.cfg.max_minutes
        if self.ctx.is_main and self.cfg.viz_every and self.progress.step == 0:
            self._record_attention(0)  # the untrained model: the first frame of an animation
        while self.progress.epoch < self.cfg.epochs and not done:
            end = self._train_epoch()
            if end is EpochEnd.STOPPED:
                break
            metrics = self._end_epoch()
            done = end is EpochEnd.LAST_STEP_STOPS or self._out_of_patience()
        if self.ctx.distributed:
            self._check_ranks_in_sync()
        return metrics

    def _how_to_go_on(self) -> str:
        """What to do once a refused write is put right: resume from the last checkpoint, or start again."""
        if not (self.run_dir / LAST).is_file():
            return "then start the run again"
        resume = resume_command(self.run_dir, self.ctx.world, self.ctx.per_node)
        return f"then continue from {LAST} (intact) with: {resume}"

    def _train_epoch(self) -> EpochEnd:
        """Steps of the current epoch from where progress points."""
        epoch = self.progress.epoch
        steps, global_steps = self.epoch_plan(epoch)
        self._check_epoch_has_steps(steps)
        report = ConsoleReport(
            len(steps), self.progress.batch, f"epoch {epoch + 1}/{self.cfg.epochs}", enabled=self.show_progress
        )
        for s in range(self.progress.batch, len(steps)):
            counts = self.step_counts(global_steps[s])
            global_tokens = counts["gold"]
            lr = self.schedule.get_last_lr()[0]
            tic = time.perf_counter()
            try:
                loss_sum = self.train_step(steps[s], counts)
            except NonFiniteLoss as err:
                report.close(show_last=False)
                self.save()
                raise UserError(
                    f"the loss became {err.value} at step {self.progress.step + 1} (the numbers "
                    f"overflowed); {self.run_dir / LAST} holds the weights before that step: "
                    "lower the learning rate (lr_factor), raise warmup or set clip_norm, "
                    "then train a new run"
                ) from None
            self.progress.batch = s + 1
            self.progress.step += 1
            loss = loss_sum / global_tokens
            rate = report.step(counts["tokens"], loss=loss, lr=lr)
            if self.board:
                self.board.step(self.progress.step, loss, lr, rate)
            self._log(
                STEPS,
                {
                    "step": self.progress.step,
                    "epoch": epoch,
                    "loss": loss,
                    "lr": lr,
                    "tokens": counts["tokens"],
                    "seconds": time.perf_counter() - tic,
                },
            )
            if self.cfg.save_every and self.progress.step % self.cfg.save_every == 0:
                self.save()
            if self.should_stop():
                if self.progress.batch == len(steps) and not self.interrupted:
                    report.close()
                    return EpochEnd.LAST_STEP_STOPS  # its validation and checkpoint follow, as any epoch's
                try:
                    self.save()
                except BaseException:  # its error is to be the only line
                    report.close(show_last=False)
                    raise
                report.close()
                return EpochEnd.STOPPED
        report.close()
        return EpochEnd.COMPLETE

    def should_stop(self) -> bool:
        """Whether training stops after this step: a stop was requested (a signal, on any rank) or
        --max-steps or --max-minutes is reached."""
        limit = (self.cfg.max_steps is not None and self.progress.step >= self.cfg.max_steps) or (
            self._deadline is not None and time.perf_counter() >= self._deadline
        )
        # Every rank must stop at the same step, whichever of them the signal reached.
        requested, limit = distributed.any_rank((self.stop.requested, limit), self.ctx)
        self.interrupted = requested
        return requested or limit

    def _end_epoch(self) -> dict:
        epoch = self.progress.epoch
        metrics = {"epoch": epoch + 1, "step": self.progress.step}
        if self.ctx.is_main:
            valid = evaluate(self.model, self.splits["valid"], self.pool, beam=self.cfg.valid_beam)
            metrics.update({f"valid_{k}": v for k, v in valid.items() if k != "n"})
            metrics["lr"] = self.schedule.get_last_lr()[0]
        self.progress.epoch = epoch + 1
        self.progress.batch = 0
        is_best = self.ctx.is_main and self._improves(metrics)
        if is_best:
            self.progress.best = metrics[f"valid_{self.cfg.select_by}"]
        self.progress.epochs_since_best = 0 if is_best else self.progress.epochs_since_best + 1
        self._log(METRICS, metrics)
        if self.board:
            self.board.epoch(metrics)
        if self.ctx.is_main and self.cfg.viz_every and (epoch + 1) % self.cfg.viz_every == 0:
            self._record_attention(epoch + 1)
        self.save(best=is_best, keep_epoch=epoch + 1 if self.cfg.keep_last else None)
        if self.show_progress:
            tqdm.write(format_metrics(metrics))
        return metrics

    def _out_of_patience(self) -> bool:
        """Early stopping (`TrainConfig.out_of_patience`), on every rank at once."""
        tired = self.cfg.out_of_patience(self.progress)
        if self.ctx.distributed:  # only the main process validates; all must stop together
            tired = distributed.all_reduce_sum(float(tired and self.ctx.is_main), self.ctx) > 0
        if tired and self.show_progress:
            tqdm.write(f"early stop: no better valid {self.cfg.select_by} for {self.cfg.patience} epochs")
        return tired

    def close(self, failed: bool = False):
        """Release the DDP wrapper before the process group it uses, leave the group, unlock the run.
        After a failure (``failed``: an exception, maybe on this rank alone) the others may never
        reach the group's barrier: leave without it, and the launcher stops them when this one exits."""
        self.net = self.model
        distributed.teardown(self.ctx, together=not failed)
        if self.board:
            self.board.close()
        self.files.unlock()

    def _check_ranks_in_sync(self):
        """DDP keeps replicas identical by construction; verify it and record the digests."""
        digests = distributed.parameter_digests(self.model, self.ctx)
        if self.ctx.is_main:
            write_json_atomic(self.run_dir / RANKS, {"parameter_sha256": digests})
        if len(set(digests)) != 1:
            raise RuntimeError(f"parameters differ across ranks after training: {digests}")

    def _record_attention(self, epoch: int) -> None:
        """Maps of the first validation sample, for ``graphformer animate`` (and TensorBoard)."""
        path = self.recorder.record(
            self.model, self.splits["valid"], self.pool, self.src_vocab, self.tgt_vocab, self.run_dir, epoch
        )
        if self.board and path is not None:
            for sublayer, png in self.recorder.pngs(path).items():
                self.board.attention(f"attention/{sublayer}", png, self.progress.step)

    def _improves(self, metrics: dict) -> bool:
        best, value = self.progress.best, metrics[f"valid_{self.cfg.select_by}"]
        larger_is_better = SELECT_BY[self.cfg.select_by]
        return best is None or (value > best if larger_is_better else value < best)

    def _log(self, name: str, record: dict):
        if self.ctx.is_main:
            self.files.log(name, record)
