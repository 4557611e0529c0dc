"""The pretraining driver: `pretrain(task, settings)` trains and evaluates masked LM + NSP.

The same engine as fine-tuning (`engine.build`, `engine.training.Trainer`): the model with its
initial weights (`--init_checkpoint` in any format, or a pretraining run's checkpoint: phase 2
continuing phase 1), the original's optimiser, checkpoints every `save_checkpoints_steps` with the
input iterator's state, and resuming by itself from the newest one. Training ends by writing the
model as a Google TF1 checkpoint in `output_dir/tf1/` (bert_config.json, bert_model.ckpt.*, and
vocab.txt when given), which fine-tuning and the original's tools load. `do_eval` writes the
original's metrics for at most `max_eval_steps` batches to `eval_results.txt`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re

from bert_tf2.data_gen.errors import DataError
from bert_tf2.engine.build import (
    RunSettings,
    build_trainer,
    check_batch_split,
    held_outputs,
    model_files,
    open_output,
    start_run,
)
from bert_tf2.engine.distribution import processes_of
from bert_tf2.engine.results import RESULTS_FILE, log_results, write_eval_results
from bert_tf2.engine.run_config import PRETRAINING, check_run_config, record_run_config
from bert_tf2.engine.trainer_config import EmptyInputError
from bert_tf2.process import fault_points, interrupts, output_lock
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)

TF1_EXPORT = "tf1"


@dataclasses.dataclass
class PretrainSettings(RunSettings):
    """run_pretraining's flags (their defaults are these): the original's own defaults where
    they differ from fine-tuning's (steps, warmup, loop length and checkpoints kept)."""
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    steps_per_loop: int = 1000  # --iterations_per_loop
    keep_checkpoint_max: int = 5
    do_train: bool = False
    do_eval: bool = False
    max_eval_steps: int = 100
    # Pretraining on a budget (docs/pretraining.md): dropout while pretraining instead of
    # bert_config.json's (the TF1 export keeps the file's), and a time budget for the schedule.
    hidden_dropout_prob: float | None = None
    attention_probs_dropout_prob: float | None = None
    train_budget_minutes: float | None = None
    warmup_proportion: float = 0.1  # with a budget: its share spent warming up
    warmup_start_fraction: float = 0.0  # with a budget: the first learning rate / the peak
    # With a budget: the share of it at which the updates reach the full train_batch_size, from
    # one micro-batch (train_batch_size / num_accumulation_steps) at the start; 0: no ramp.
    batch_size_ramp: float = 0.0


# The settings that shape a time budget's schedule, and what to do instead without a budget.
BUDGET_ONLY = {"warmup_proportion": "set --num_warmup_steps",
               "warmup_start_fraction": "set --num_warmup_steps",
               "batch_size_ramp": "the batch is --train_batch_size throughout"}


# What tf.io.parse_example says of a record whose features are not the spec's.
_PARSE_ERROR = re.compile(r"Key: \w+|serialized Example")


@contextlib.contextmanager
def unreadable_input_reported(task):
    """TensorFlow's DataLossError on a damaged record file, and its InvalidArgumentError on a
    record of other lengths, as a DataError naming the file (and byte or record)."""
    from bert_tf2.process import environment

    if not environment.uses_tensorflow():  # the NumPy reader names the file itself
        yield
        return
    import tensorflow as tf

    try:
        yield
    except tf.errors.DataLossError as error:
        raise task.input_error(error) from None
    except tf.errors.InvalidArgumentError as error:  # a record tf.io.parse_example refused
        if not _PARSE_ERROR.search(getattr(error, "message", "")):
            raise
        raise task.input_error(error) from None


def _time_budget(settings: PretrainSettings):
    """`--train_budget_minutes` and its schedule's shape as an `engine.time_budget.TimeBudget`
    (None without a budget)."""
    from bert_tf2.engine.time_budget import TimeBudget

    if settings.train_budget_minutes is None:
        return None
    if settings.train_budget_minutes <= 0:
        raise SettingsError(f"--train_budget_minutes={settings.train_budget_minutes}: must be "
                            f"above 0")
    if not 0 < settings.warmup_proportion <= 1:
        raise SettingsError(f"--warmup_proportion={settings.warmup_proportion}: must be in "
                            f"(0, 1] with --train_budget_minutes")
    if not 0 <= settings.warmup_start_fraction <= 1:
        raise SettingsError(f"--warmup_start_fraction={settings.warmup_start_fraction}: must be "
                            f"in [0, 1]")
    if not 0 <= settings.batch_size_ramp <= 1:
        raise SettingsError(f"--batch_size_ramp={settings.batch_size_ramp}: must be in [0, 1]")
    if settings.batch_size_ramp and settings.num_accumulation_steps == 1:
        raise SettingsError(f"--batch_size_ramp={settings.batch_size_ramp} grows each update "
                            f"from one micro-batch to --num_accumulation_steps of them: set "
                            f"--num_accumulation_steps above 1 (the micro-batch is "
                            f"--train_batch_size / --num_accumulation_steps)")
    return TimeBudget(60.0 * settings.train_budget_minutes, settings.learning_rate,
                      settings.warmup_proportion, settings.warmup_start_fraction,
                      settings.batch_size_ramp)


def pretrain(task, settings: PretrainSettings) -> None:
    """Train and evaluate as `settings` say, holding `output_dir` against other processes."""
    with output_lock.holding(held_outputs(settings)):
        _pretrain(task, settings)


def _pretrain(task, settings: PretrainSettings) -> None:
    from bert_tf2.engine.build import check_backend
    from bert_tf2.modeling import checkpoints, convert
    from bert_tf2.process.atomic_files import recover_directory, staged_directory

    check_backend()
    if not (settings.do_train or settings.do_eval):
        raise SettingsError("at least one of --do_train or --do_eval must be set")
    if settings.train_batch_size % settings.num_accumulation_steps:
        raise SettingsError(f"--train_batch_size={settings.train_batch_size} is not a multiple "
                            f"of --num_accumulation_steps={settings.num_accumulation_steps}")
    file_config, vocab_file = model_files(settings, vocab_required=False)
    config = dataclasses.replace(file_config, **{
        name: value for name in ("hidden_dropout_prob", "attention_probs_dropout_prob")
        if (value := getattr(settings, name)) is not None})
    budget = _time_budget(settings)
    task.prepare(config, vocab_file)
    run = start_run(settings, config, vocab_file)
    # One run per output_dir, as fine-tuning: the records' shape and the model decide the run,
    # the schedule must match to resume.
    identity = {**task.identity(), "model": file_config.to_dict()}
    training = ({"init_checkpoint": settings.init_checkpoint,
                 "learning_rate": settings.learning_rate,
                 "train_batch_size": settings.train_batch_size,
                 "num_train_steps": settings.num_train_steps,
                 "num_warmup_steps": settings.num_warmup_steps,
                 "optimizer": settings.optimizer,
                 "num_accumulation_steps": settings.num_accumulation_steps,
                 "random_seed": settings.random_seed,
                 "dropout": [config.hidden_dropout_prob, config.attention_probs_dropout_prob],
                 "time_budget": dataclasses.asdict(budget) if budget else None}
                if settings.do_train else None)
    check_run_config(settings.output_dir, identity, training, kind=PRETRAINING)
    replicas = run.strategy.num_replicas_in_sync
    check_batch_split(settings, replicas)
    logger.info("%s, %s on %d replica(s), dtype %s", task.describe(),
                settings.distribution_strategy, replicas, settings.dtype)
    if budget and (settings.distribution_strategy == "multi_worker_mirrored"
                   or processes_of(run.strategy) > 1):
        raise SettingsError("--train_budget_minutes runs in one process: each machine's clock "
                            "would set its own learning rate and its own end; use "
                            "--num_train_steps on several")
    trainer = build_trainer(lambda: task.build_model(config), task, run.strategy, settings,
                            settings.num_train_steps, settings.num_warmup_steps,
                            time_budget=budget)
    open_output(run, settings)
    if run.chief:
        record_run_config(settings.output_dir, identity, training, kind=PRETRAINING)
    output_lock.setup_done(settings.output_dir)

    def dataset_fn(batch_size: int, is_training: bool):
        return lambda context: task.dataset(
            context.get_per_replica_batch_size(batch_size) if context else batch_size,
            is_training, settings.random_seed, context)

    if settings.do_train:
        # Each dataset element holds the micro-batches of one update; with a batch-size ramp,
        # one micro-batch (an update takes as many as the budget's share spent says).
        batch = settings.train_batch_size
        if trainer.ramp:
            batch //= settings.num_accumulation_steps
        with unreadable_input_reported(task):
            trainer.train(dataset_fn(batch, True))
        export = os.path.join(settings.output_dir, TF1_EXPORT)
        if run.chief:  # staged and swapped in: tf1/ is complete or absent, whatever the kill
            recover_directory(export)
            interrupts.at(f"while exporting the TF1 checkpoint to {export}")
            with staged_directory(export, fault_point="tf1_export") as staging:
                convert.save_any(trainer.model, staging, "tf1", global_step=trainer.global_step,
                                 config=file_config)
                if vocab_file:
                    checkpoints.copy_vocab(vocab_file, staging)
            logger.info("TF1 checkpoint of the trained model: %s", export)
    elif not trainer.restore_latest() and not settings.init_checkpoint:
        raise SettingsError(f"--do_eval without --do_train: no checkpoint in "
                            f"{settings.output_dir} and no --init_checkpoint")

    if settings.do_eval:
        interrupts.at(f"in the evaluation at step {trainer.global_step}")
        with unreadable_input_reported(task):
            try:
                results = trainer.evaluate(dataset_fn(settings.eval_batch_size, False),
                                           max_steps=settings.max_eval_steps)
            except EmptyInputError:
                raise DataError(f"{', '.join(task.files)}: fewer records than "
                                f"--eval_batch_size={settings.eval_batch_size}, nothing to "
                                f"evaluate; use a smaller --eval_batch_size") from None
        fault_points.reached("evaluation")
        results["global_step"] = trainer.global_step
        path = os.path.join(settings.output_dir, RESULTS_FILE)
        if run.chief:
            write_eval_results(path, results)
            log_results(results, logger)
            logger.info("eval results written to %s", path)
