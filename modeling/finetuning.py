"""Fine-tuning, the part every task runner shares: build, train with evaluation, keep the best.

A runner supplies a model factory (encoder + its head), a task (`loss_and_metrics` and
`predict_step`, see `training.Task`), its input pipelines and an `evaluate()` that scores the
current model with the task's own metrics (GLUE, SQuAD EM/F1, conlleval). This module then:
- builds the model and the SPEC.md section 7 optimiser (linear warmup, linear decay,
  AdamWeightDecay, clipping at global norm 1) under the distribution strategy, and loads
  `--init_checkpoint` in any format `checkpoints.load_initial_weights` reads (the new head stays
  initialised, and the log says so);
- trains with `training.Trainer` (checkpoints, resume, progress lines, TensorBoard), evaluating at
  the end of every epoch, or every `eval_every_steps`, and at the last step;
- writes each evaluation to `eval_results.txt` (the original's `key = value` lines) and TensorBoard
  (`eval/`), and keeps the weights that scored best on the task's main metric in `best/` with
  `best/eval_results.txt`; a resumed run knows the best score so far.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

from modeling.atomic_files import (recover_directory, replace_directory,
                                   staging_directory)
from modeling.training import Trainer, TrainerConfig, is_boundary, write_eval_results

logger = logging.getLogger(__name__)

BEST_DIR = "best"
RESULTS_FILE = "eval_results.txt"
RUN_CONFIG = "run_config.json"


class RunConfigError(ValueError):
    """`output_dir` holds a run made with other settings."""


def check_run_config(output_dir: str, identity: dict, training: dict | None) -> None:
    """Refuse to mix runs in one `output_dir`, then record this one in `run_config.json`.

    `identity` (task, labels, sequence length, casing, ...) must match any earlier run: its
    checkpoints, best weights and features would not fit otherwise. `training` (learning rate,
    batch, steps, initial weights; None when not training) must match too when a training
    checkpoint is there to resume from: resuming with another schedule is never what was meant.
    """
    import json

    from modeling.atomic_files import write_text

    path = os.path.join(output_dir, RUN_CONFIG)
    current = json.loads(json.dumps({"identity": identity, "training": training}))
    previous = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
    if previous:
        groups = ["identity"]
        if training is not None and previous.get("training") is not None and any(
                name.startswith("ckpt-") for name in os.listdir(output_dir)):
            groups.append("training")
        changed = [f"{key} was {previous[group].get(key)!r}, now {value!r}"
                   for group in groups for key, value in current[group].items()
                   if previous[group].get(key) != value]
        if changed:
            raise RunConfigError(f"{output_dir} holds a run with other settings "
                                 f"({'; '.join(changed)}): use another --output_dir, or empty it")
    if training is not None:
        write_text(path, json.dumps(current, indent=1, sort_keys=True) + "\n")


@dataclasses.dataclass
class FinetuneOptions:
    output_dir: str
    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    train_batch_size: int
    steps_per_epoch: float = 0  # examples / batch: evaluation at each epoch's end (rounded)
    eval_every_steps: int = 0
    init_checkpoint: str | None = None
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 1
    steps_per_loop: int = 100
    optimizer: str = "adamw"
    num_accumulation_steps: int = 1
    jit_compile: bool = False
    dtype: str = "float32"

    @property
    def evaluation_interval(self) -> float:
        return self.eval_every_steps or self.steps_per_epoch or self.num_train_steps


def build_trainer(model_fn: Callable, task, strategy, options: FinetuneOptions) -> Trainer:
    """The model (`model_fn()`, with the initial weights) and optimiser, in a `Trainer`."""
    import keras

    from modeling import checkpoints
    from modeling.optimization import create_optimizer

    report = None
    with strategy.scope():
        model = model_fn()
        if options.init_checkpoint:
            report = checkpoints.load_initial_weights(model, options.init_checkpoint,
                                                      allow_new_heads=True)  # logs it
        optimizer = create_optimizer(options.learning_rate, options.num_train_steps,
                                     options.num_warmup_steps, options.optimizer)
        if options.dtype == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = Trainer(model, optimizer, task, strategy, TrainerConfig(
        output_dir=options.output_dir, num_train_steps=options.num_train_steps,
        steps_per_loop=options.steps_per_loop,
        save_checkpoints_steps=options.save_checkpoints_steps,
        keep_checkpoint_max=options.keep_checkpoint_max,
        num_accumulation_steps=options.num_accumulation_steps, jit_compile=options.jit_compile,
        examples_per_step=options.train_batch_size,
        callback_every_steps=options.evaluation_interval, save_at_callbacks=True,
        checkpoint_iterator=False))
    trainer.init_report = report
    return trainer


class NoTrainedWeightsError(ValueError):
    """Evaluation, prediction or export was asked for, but no weights include a trained head."""


def choose_weights(trainer: Trainer, best_metric: str, trained: bool, evaluated: bool,
                   use_best: bool) -> tuple[str, int]:
    """Load the weights that evaluation, prediction and export should use into the model.

    In order: the best weights (`best/`, when `use_best` and this run evaluated or did not
    train), the weights just trained, the newest training checkpoint, `--init_checkpoint` if it
    holds the head too. Returns what was chosen (for the log) and its step.
    """
    best = BestCheckpoint(trainer.work_dir, best_metric)
    if use_best and (evaluated or not trained) and best.restore(trainer.model):
        step = int(best.results.get("global_step", 0))
        return f"the best weights ({best_metric} = {best.score:.4f} at step {step})", step
    if trained:
        return f"the weights after step {trainer.global_step}", trainer.global_step
    latest = trainer.restore_latest()
    if latest:
        return f"training checkpoint {latest}", trainer.global_step
    report = trainer.init_report
    if report is not None and not report.initialised:
        return f"--init_checkpoint {report.source}", 0
    raise NoTrainedWeightsError(
        f"no trained weights: {trainer.config.output_dir} has no checkpoint and "
        f"--init_checkpoint lacks {', '.join(report.initialised) if report else 'the head'}; "
        f"train first (--do_train)")


class BestCheckpoint:
    """The weights with the best `metric` so far, in `output_dir/best/` (model only): the
    highest, or the lowest for a loss or an error."""

    def __init__(self, output_dir: str, metric: str):
        self.directory = os.path.join(output_dir, BEST_DIR)
        recover_directory(self.directory)
        self.metric = metric
        self.lower_is_better = lower_is_better(metric)
        self.results = read_eval_results(os.path.join(self.directory, RESULTS_FILE))

    @property
    def score(self) -> float | None:
        return self.results.get(self.metric) if self.results else None

    def offer(self, model, results: dict) -> bool:
        """Keep `model`'s weights if `results[metric]` beats the best so far."""
        import tensorflow as tf

        if self.metric not in results:
            raise KeyError(f"the best-checkpoint metric {self.metric!r} is not among the "
                           f"evaluation results: {', '.join(sorted(results))}")
        score = results[self.metric]
        if self.score is not None and not (score < self.score if self.lower_is_better
                                           else score > self.score):
            return False
        # Written beside the old copy, then swapped in: a crash leaves one complete copy.
        staging = staging_directory(self.directory)
        tf.train.Checkpoint(model=model).write(os.path.join(staging, "model"))
        write_eval_results(os.path.join(staging, RESULTS_FILE), results)
        replace_directory(staging, self.directory)
        logger.info("new best %s = %.4f at step %d (was %s): saved in %s", self.metric, score,
                    int(results.get("global_step", -1)),
                    "none" if self.score is None else f"{self.score:.4f}", self.directory)
        self.results = dict(results)
        return True

    def restore(self, model) -> bool:
        import tensorflow as tf

        prefix = os.path.join(self.directory, "model")
        if not os.path.isfile(prefix + ".index"):
            return False
        self.results = read_eval_results(os.path.join(self.directory, RESULTS_FILE))
        tf.train.Checkpoint(model=model).read(prefix).assert_existing_objects_matched()
        logger.info("restored the best weights (%s = %s at step %d) from %s", self.metric,
                    self.score, int(self.results.get("global_step", -1)), self.directory)
        return True


def train_and_evaluate(trainer: Trainer, train_dataset_fn: Callable,
                       evaluate: Callable[[], dict] | None, options: FinetuneOptions,
                       best_metric: str | None = None) -> dict | None:
    """Train to the last step, evaluating at every interval; returns the last evaluation.

    `evaluate()` returns the task's metrics for the model as it stands (`eval_` prefixed keys);
    `best_metric` names the one to keep the best weights by.
    """
    best = BestCheckpoint(trainer.work_dir, best_metric) if best_metric else None
    last = {}

    def on_loop_end(step, train_metrics):
        if evaluate is None:
            return
        if not is_boundary(step, options.evaluation_interval) and step < options.num_train_steps:
            return
        results = evaluate_and_record(trainer, evaluate, options.output_dir)
        epoch = step / options.steps_per_epoch if options.steps_per_epoch else None
        logger.info("evaluation at step %d%s: %s", step,
                    f" (epoch {epoch:.2f})" if epoch else "", format_results(results))
        if best is not None:
            best.offer(trainer.model, results)
        last.clear()
        last.update(results)

    trainer.train(train_dataset_fn, on_loop_end)
    return last or None


def evaluate_and_record(trainer: Trainer, evaluate: Callable[[], dict], output_dir: str,
                        step: int | None = None) -> dict:
    """Run `evaluate()`, add `global_step` (the trainer's, unless `step` says which weights
    these are), write eval_results.txt and TensorBoard's eval/."""
    step = trainer.global_step if step is None else step
    results = dict(evaluate())
    trainer._summary("eval", results, step)
    results["global_step"] = step
    if trainer.is_chief:
        write_eval_results(os.path.join(output_dir, RESULTS_FILE), results)
    return results


def lower_is_better(metric: str) -> bool:
    return "loss" in metric or "error" in metric


def read_eval_results(path: str) -> dict:
    """`key = value` lines back into a dict of floats (empty when the file is absent)."""
    results = {}
    if not os.path.isfile(path):
        return results
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.partition(" = ")
            if sep:
                results[key.strip()] = float(value)
    return results


def format_results(results: dict) -> str:
    return ", ".join(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}"
                     for k, v in sorted(results.items()))
