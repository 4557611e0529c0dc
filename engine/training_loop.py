"""The training loop, written once for every backend: what happens between the steps.

`engine.training.Trainer` (TensorFlow: tf.data, tf.distribute, tf.train.Checkpoint) and
`engine.keras_training.KerasTrainer` (JAX: NumPy input fed ahead, jax.jit, safetensors files) are
`TrainingLoop`s. This class holds everything they do alike:
- resuming: partial checkpoints an interrupted run left are removed, the newest checkpoint is
  restored and `on_resume(step)` runs, so that a run killed at any point (kill -9, Ctrl-C,
  SIGTERM: `process.interrupts`) goes on exactly as an uninterrupted one;
- loop boundaries: `steps_per_loop` steps at a time, cut at checkpoints and at
  `callback_every_steps` (each epoch's end), a stop request honoured after the step in flight;
- a time budget (`engine.time_budget`): the learning rate, and with a batch-size ramp the
  micro-batches per update, set before each loop from the share spent, loops cut to 1% of it,
  the checkpoint and the end when it is spent;
- after each loop: the NaN stop (nothing saved; the last good checkpoint named), the log line
  and TensorBoard's `train/` summaries (metrics, learning rate, examples/s, and where the backend
  measures it the share of the loop spent waiting on input), the checkpoint cadence, then
  `on_loop_end(step, metrics)` (evaluation, `best/`);
- checkpoints: the backend takes the state off the devices between two loops, and
  `engine.checkpoint_writer.CheckpointWriter` writes it in a thread while training goes on; the
  next checkpoint, the end of training and anything recorded against a checkpoint
  (`wait_for_checkpoint()`: an evaluation's results, `best/`) wait for it first;
- evaluation: `(sum, count)` metric pairs added over batches (and, in the backend's step, over
  replicas), so any number of batches and devices gives the exact ratio; `eval/` summaries.

A backend supplies the rest, a small interface: where its checkpoints are (`latest_checkpoint`,
`_checkpoint_folder`), restoring (`_restore_for_training`) and saving (`_save`: the state, and
the function that writes it), its training input (`_training_input`, `_close_input`,
`_input_waited`), `_run_steps` (n updates, their metric sums), the stop flag (`_request_stop`),
the evaluation step and input, `predict`, `restore_latest`, `write_summary`, `write_weights`,
`global_step` and `current_learning_rate`, and for a batch-size ramp `_set_micro_batches`.
"""
from __future__ import annotations

import logging
import math
import os
import time
from typing import Callable, Iterable

from bert_tf2.engine import time_budget
from bert_tf2.engine.checkpoint_writer import CheckpointWriter
from bert_tf2.engine.trainer_config import (
    EmptyInputError,
    NonFiniteLossError,
    is_boundary,
    is_chief,
    next_boundary,
    ratios,
    remove_partial_checkpoints,
    worker_dir,
)
from bert_tf2.process import fault_points, interrupts
from bert_tf2.process.errors import SettingsError
from bert_tf2.process.progress import format_duration

logger = logging.getLogger(__name__)


class TrainingLoop:
    """A trainer's loop (see the module docstring); subclasses implement the backend's interface
    below."""

    def __init__(self, model, optimizer, task, strategy, config):
        if config.num_accumulation_steps < 1:
            raise ValueError("num_accumulation_steps must be at least 1")
        self.model = model
        self.optimizer = optimizer
        self.task = task
        self.strategy = strategy
        self.config = config
        self.is_chief = is_chief(strategy)
        # Where this process keeps its files: output_dir for the chief, a scratch folder of its
        # own for every other worker (several machines share --output_dir).
        self.work_dir = worker_dir(strategy, config.output_dir)
        self._writers = {}  # TensorBoard's, by kind
        self._checkpoints = CheckpointWriter()
        self.clock = time.monotonic  # the time budget's clock (the tests give their own)
        # A batch-size ramp (`engine.time_budget`): each input element is one micro-batch, and
        # an update takes as many as the share of the budget spent says.
        self.ramp = bool(config.time_budget is not None
                         and getattr(config.time_budget, "batch_size_ramp", 0) > 0
                         and config.num_accumulation_steps > 1)
        self._micro_batches_used = 0  # with a ramp: the input elements used so far

    # ------------------------------------------------------------------ the backend's interface
    @property
    def global_step(self) -> int:
        raise NotImplementedError

    def current_learning_rate(self) -> float:
        raise NotImplementedError

    def latest_checkpoint(self) -> str | None:
        """The newest complete training checkpoint this run would resume from."""
        raise NotImplementedError

    def _checkpoint_folder(self) -> str | None:
        """The folder this process writes checkpoints into (None: it writes none)."""
        raise NotImplementedError

    def _open(self, dataset_fn: Callable) -> None:
        """Before anything is restored (TensorFlow: the input iterator joins the checkpoint)."""

    def _restore_for_training(self) -> str | None:
        """Restores the newest checkpoint, if any, for training on; returns its path."""
        raise NotImplementedError

    def _training_input(self, dataset_fn: Callable, elements: int):
        """The input after its first `elements` elements (an update's batch each, or with a
        batch-size ramp a micro-batch each): what `_run_steps` takes them from."""
        raise NotImplementedError

    def _close_input(self, batches) -> None:
        """Lets the training input go (the end of `train`, however it ends)."""

    def _input_waited(self, batches) -> float | None:
        """Seconds the steps have waited for their batches so far (None: not measured)."""
        return None

    def _run_steps(self, batches, count: int) -> dict:
        """`count` updates (fewer if a stop was requested after one): their summed metrics,
        `{name: [sum, count]}`."""
        raise NotImplementedError

    def _request_stop(self, stop: bool) -> None:
        """Sets or clears the flag that ends `_run_steps` after the step in flight."""
        raise NotImplementedError

    def _set_micro_batches(self, count: int) -> None:
        """With a batch-size ramp: the micro-batches (input elements) each update of the next
        `_run_steps` takes."""
        raise NotImplementedError

    def _save(self, step: int) -> Callable[[], str]:
        """Take the state of `step` off the devices (the next update may change it) and return
        the function that writes it as a checkpoint, visible only once complete, and returns its
        path; that function runs in the checkpoint writer's thread."""
        raise NotImplementedError

    def _evaluation_step(self) -> Callable:
        """`batch -> {name: [sum, count]}` summed over the replicas, for the current weights."""
        raise NotImplementedError

    def _evaluation_input(self, dataset_fn: Callable) -> Iterable:
        raise NotImplementedError

    def write_summary(self, kind: str, values: dict, step: int) -> None:
        """Scalars into TensorBoard's `kind/` folder under output_dir (the chief's only)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the loop
    def wait_for_checkpoint(self) -> None:
        """Return once the last checkpoint saved is complete on disk (raise if its write
        failed): before anything is recorded against it."""
        self._checkpoints.wait()

    def train(self, dataset_fn: Callable, on_loop_end: Callable | None = None,
              on_resume: Callable | None = None) -> dict:
        """Train to `num_train_steps` updates (or to the end of `time_budget`) from wherever the
        newest checkpoint left off.

        `dataset_fn(input_context)` returns this input pipeline's batches, per replica with
        `num_accumulation_steps` micro-batches per element. `on_loop_end(step, metrics)` runs after
        each loop (and its checkpoint); `on_resume(step)` runs once after a checkpoint is
        restored, before training goes on (to finish what a killed run left undone at that
        step). Returns the last loop's metrics.
        """
        folder = self._checkpoint_folder()
        for path in remove_partial_checkpoints(folder) if folder else ():
            logger.info("removed %s, a partial checkpoint left by an interrupted run", path)
        self._open(dataset_fn)
        self._check_budget_record()
        resumed = self._restore_for_training()
        if resumed:
            logger.info("resumed from %s at step %d", resumed, self.global_step)
            interrupts.rerun(f"resumes from {resumed} (step {self.global_step})")
            if on_resume:
                on_resume(self.global_step)
        step = self.global_step
        if self.ramp:
            self._micro_batches_used = time_budget.read_micro_batches(
                self._checkpoint_folder() or self.config.output_dir, step)
            if self._micro_batches_used is None:
                raise SettingsError(f"{self.config.output_dir}: its checkpoint of step {step} "
                                    f"was trained without --batch_size_ramp; use a new "
                                    f"--output_dir")
        batches = self._training_input(dataset_fn, self._micro_batches_used if self.ramp
                                       else step)
        self._request_stop(False)

        def stop():
            self._request_stop(True)

        interrupts.on_signal(stop)
        try:
            metrics = self._train_to_end(batches, step, on_loop_end)
            self.wait_for_checkpoint()
            return metrics
        except BaseException:
            # Stopped (a signal, an error): the checkpoint being written is finished first, so
            # that no half-written one is left; its own failure would only hide this one.
            try:
                self.wait_for_checkpoint()
            except Exception as error:  # noqa: BLE001
                logger.warning("the checkpoint being written when the run stopped: %s", error)
            raise
        finally:
            interrupts.forget(stop)
            self._close_input(batches)

    def _check_budget_record(self) -> None:
        """Before a restore: a run on a time budget needs its checkpoint's figure (a folder
        trained without a budget has none, and the restore would fail on the optimiser's
        learning-rate variable with a less clear message)."""
        latest = self.latest_checkpoint() if self.config.time_budget is not None else None
        if latest:
            step = int(os.path.basename(latest).split("-")[-1].split(".")[0])
            time_budget.read_spent(self._checkpoint_folder() or self.config.output_dir, step)

    def _budget_clock(self, step: int) -> time_budget.BudgetClock | None:
        """The time budget's clock, from what the checkpoint of `step` recorded (None: no
        budget)."""
        if self.config.time_budget is None:
            return None
        folder = self._checkpoint_folder() or self.config.output_dir
        return time_budget.BudgetClock(self.config.time_budget,
                                       time_budget.read_spent(folder, step), self.clock)

    def _train_to_end(self, batches, step: int, on_loop_end: Callable | None) -> dict:
        cfg = self.config
        metrics = {}
        where = lambda: f"at training step {self.global_step} of {cfg.num_train_steps}"  # noqa
        budget = self._budget_clock(step)
        seconds_per_micro_batch = None  # the budget's measure of speed (an update's batch: 1)
        micro_batches = 1  # the next loop's micro-batches per update, with a ramp
        finished = budget is not None and budget.done()
        while step < cfg.num_train_steps and not finished:
            interrupts.at(where)  # again after each evaluation, which says its own
            n = min(cfg.steps_per_loop, cfg.num_train_steps - step,
                    cfg.save_checkpoints_steps - step % cfg.save_checkpoints_steps,
                    next_boundary(step, cfg.callback_every_steps) - step)
            if budget:
                if self.ramp:
                    micro_batches = budget.micro_batches(cfg.num_accumulation_steps)
                    self._set_micro_batches(micro_batches)
                n = budget.loop_steps(n, None if seconds_per_micro_batch is None
                                      else seconds_per_micro_batch * micro_batches)
                self.optimizer.learning_rate = budget.learning_rate()
                spent = budget.spent()
            start, waited, before = time.time(), self._input_waited(batches), step
            metrics = ratios(self._run_steps(batches, n))
            elapsed = time.time() - start
            step = self.global_step
            # Decided once: the budget checkpoint below and the loop's end agree.
            finished = budget is not None and budget.done()
            if budget:
                seconds_per_micro_batch = ((budget.spent() - spent)
                                           / max((step - before) * micro_batches, 1))
            if self.ramp:
                self._micro_batches_used += (step - before) * micro_batches
            if not math.isfinite(metrics["loss"]):
                self.wait_for_checkpoint()  # so that the message names the last one written
                raise NonFiniteLossError(
                    f"{cfg.output_dir}: the loss is {metrics['loss']} in the {n} steps ending at "
                    f"step {step}; stopped without saving (last good checkpoint: "
                    f"{self.latest_checkpoint() or 'none'}). Lower --learning_rate or check the "
                    f"data, then run again")
            lr = self.current_learning_rate()
            examples = cfg.examples_per_step  # an update's, at this loop's micro-batches
            if self.ramp:
                examples = examples * micro_batches // cfg.num_accumulation_steps
            speed = examples * n / elapsed if examples else 0.0
            scalars = {**metrics, "learning_rate": lr, "examples_per_second": speed}
            if self.ramp:
                scalars["batch_size"] = examples
            wait = ""
            if waited is not None:
                scalars["input_wait_share"] = share = (
                    (self._input_waited(batches) - waited) / max(elapsed, 1e-9))
                wait = f" | input wait {100 * share:.1f}%"
            self.write_summary("train", scalars, step)
            eta = (cfg.num_train_steps - step) * elapsed / n
            share = ""
            if budget:
                eta = min(eta, budget.remaining())
                share = f" | budget {100 * budget.share():.1f}% spent"
            if self.ramp:
                share = f" | batch {examples}{share}"
            logger.info("step %d/%d | %s | lr %.3g | %.1f examples/s%s%s | eta %s", step,
                        cfg.num_train_steps,
                        " | ".join(f"{k} {v:.4f}" for k, v in metrics.items()), lr, speed, wait,
                        share, format_duration(eta))
            fault_points.reached("train_loop")
            if (step % cfg.save_checkpoints_steps == 0 or step >= cfg.num_train_steps
                    or (cfg.save_at_callbacks and is_boundary(step, cfg.callback_every_steps))
                    or finished):
                start = time.perf_counter()
                self._checkpoints.wait()  # the previous checkpoint's write, if still going
                folder = self._checkpoint_folder()
                if budget and folder:  # before the checkpoint: each complete one has its figure
                    time_budget.record_spent(
                        folder, step, budget.spent(), keep=cfg.keep_checkpoint_max + 1,
                        micro_batches=self._micro_batches_used if self.ramp else None)
                write = self._save(step)
                self._checkpoints.submit(write, then=_saved(step, time.perf_counter() - start))
            if on_loop_end:
                on_loop_end(step, metrics)
        return metrics

    def evaluate(self, dataset_fn: Callable, max_steps: int | None = None) -> dict:
        """Metrics over a finite dataset (or its first `max_steps` batches), summed exactly."""
        step = self._evaluation_step()
        totals = None
        for i, batch in enumerate(self._evaluation_input(dataset_fn)):
            if max_steps is not None and i >= max_steps:
                break
            sums = step(batch)
            totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
        if totals is None:
            raise EmptyInputError("evaluation dataset is empty")
        metrics = ratios(totals)
        self.write_summary("eval", metrics, self.global_step)
        return metrics


def _saved(step: int, waited: float) -> Callable[[str, float], None]:
    """What follows a checkpoint's write (in the writer's thread): the log line (how long training
    waited for the checkpoint, how long its write took beside training), and what a rerun of the
    command would now do."""
    def then(path: str, seconds: float) -> None:
        logger.info("saved %s (training waited %.2f s; written in %.2f s beside it)", path,
                    waited, seconds)
        interrupts.rerun(f"resumes from {path} (step {step})")
    return then
