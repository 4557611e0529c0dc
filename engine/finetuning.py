"""The fine-tuning driver: one function runs any task from its settings to its result files.

`finetune(task, settings)` does, for every task of `tasks/` (see `engine.task` for what a task
provides):
- checks the settings and the task's own, and the `--best_metric` name, before anything is read;
- finds the model's config and vocabulary, seeds, sets precision and the distribution strategy;
- reads each split the run needs, refuses an `output_dir` that holds another run (`run_config`)
  and loads the initial weights, all before any file in `output_dir` is written;
- converts each split once into `OUTPUT_DIR/NAME.tf_record` (`data_gen.feature_cache`: reused
  while the data, vocabulary and settings are unchanged);
- trains with the original's step arithmetic (`num_train_steps = int(examples / batch * epochs)`,
  `num_warmup_steps = int(steps * warmup_proportion)`, unless given), evaluating at every epoch's
  end (or every `eval_every_steps`) and at the last step: `eval_results.txt` (the original's
  `key = value` lines), TensorBoard's `eval/`, and the best weights in `best/`; an interrupted run
  resumes by itself;
- loads the weights that prediction and export use (`choose_weights`), evaluates them when it did
  not train, writes what they predict on the evaluation splits and, with `do_predict`, on the
  prediction splits, and with `export_dir` saves the task's serving module as a SavedModel.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from typing import Callable

import numpy as np

from bert_tf2.engine.best_checkpoint import BestCheckpoint
from bert_tf2.engine.build import (
    RunSettings,
    build_trainer,
    check_batch_split,
    held_outputs,
    model_files,
    open_output,
    start_run,
)
from bert_tf2.engine.distribution import KerasStrategy, processes_of
from bert_tf2.engine.results import (
    RESULTS_FILE,
    format_results,
    log_results,
    read_eval_results,
    write_eval_results,
)
from bert_tf2.engine.run_config import check_run_config, record_run_config
from bert_tf2.engine.trainer_config import is_boundary
from bert_tf2.process import environment, evaluation_gate, fault_points, interrupts, output_lock
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class FinetuneSettings(RunSettings):
    """What a fine-tuning runner's flags say (beyond the task's own)."""

    max_seq_length: int = 128  # WordPiece tokens per example (window)
    do_lower_case: bool = True
    do_train: bool = False  # fine-tune on the training split
    do_eval: bool = False  # score the evaluation splits, during and after training
    do_predict: bool = False  # write the prediction splits' result files
    export_dir: str | None = None  # a SavedModel serving raw strings
    export_litert: str = "int8"  # and its LiteRT file (engine.litert): int8, float32 or none
    export_keras_hub: str | None = None  # a KerasHub preset folder (modeling.keras_hub_preset)
    keras_hub_approximate_gelu: bool = False  # export a gelu_exact model with KerasHub's tanh
    predict_batch_size: int = 8
    num_train_epochs: float = 3.0  # num_train_steps = int(examples / batch * epochs)
    warmup_proportion: float = 0.1  # num_warmup_steps = int(steps * proportion)
    eval_every_steps: int = 0  # 0: at the end of every epoch
    use_best_checkpoint: bool = True  # predict and export with best/, not the last weights
    trim_padding: bool = True  # batches cut to their longest row (not on TPUs)
    bucket_by_length: bool = True  # rows of similar length batched together (with trim_padding)
    pack_examples: bool = False  # several training examples per row (tasks that support it)
    best_metric: str | None = None  # None: eval_ + the task's main metric


class NoTrainedWeightsError(SettingsError):
    """Evaluation, prediction or export was asked for, but no weights include a trained head."""


# ------------------------------------------------------------------------------------ the driver
def finetune(task, settings: FinetuneSettings) -> None:
    """Run `task` as `settings` say (see the module docstring), holding `output_dir` and
    `export_dir` against other processes (`process.output_lock`) from the start."""
    check_settings(settings)
    with output_lock.holding(held_outputs(settings, export_dir=settings.export_dir,
                                          export_keras_hub=settings.export_keras_hub)):
        _finetune(task, settings)


def _finetune(task, settings: FinetuneSettings) -> None:
    from bert_tf2.data_gen.tokenization import FullTokenizer, special_token_ids
    from bert_tf2.engine.task import Setup

    task.check(settings)
    if settings.pack_examples and not task.packs_examples:
        raise SettingsError(f"--pack_examples: {task.title} cannot pack several examples into "
                            f"one row (classification can)")
    best_metric = settings.best_metric or prefix(task.eval_splits()[0].name,
                                                 len(task.eval_splits())) + task.main_metric
    check_best_metric(task, best_metric)
    config, vocab_file = model_files(settings)
    if settings.export_keras_hub:  # refused now, not after the training
        from bert_tf2.modeling import keras_hub_preset

        config.require_bert_architecture(f"--export_keras_hub={settings.export_keras_hub}")
        keras_hub_preset.require()
        keras_hub_preset.check_activation(config, settings.keras_hub_approximate_gelu,
                                          f"--export_keras_hub={settings.export_keras_hub}")
    if settings.max_seq_length > config.max_position_embeddings:
        raise SettingsError(f"--max_seq_length={settings.max_seq_length} exceeds the model's "
                            f"max_position_embeddings={config.max_position_embeddings}")
    run = start_run(settings, config, vocab_file)
    batching = batching_of(settings, run.strategy)
    tokenizer = FullTokenizer(vocab_file, do_lower_case=settings.do_lower_case)
    # A DataError naming the file; without [UNK] the first unknown character would fail.
    special_token_ids(tokenizer.vocab, ("[CLS]", "[SEP]", "[UNK]"), source=vocab_file)
    task.prepare(Setup(config, vocab_file, tokenizer, settings.max_seq_length,
                       settings.do_lower_case))
    # What decides the features and the head; an output_dir holds one such run.
    identity = {**task.identity(), "max_seq_length": settings.max_seq_length,
                "do_lower_case": settings.do_lower_case}
    check_run_config(settings.output_dir, identity, None)
    # Everything that can refuse the run does so before a file in output_dir is written: the
    # data is read (not yet converted), the settings checked, the initial weights loaded.
    data = SplitReader(task, identity, vocab_file, run.work_dir)
    train = data.read(task.train_split()) if settings.do_train else None
    evals = [data.read(split) for split in task.eval_splits()] if settings.do_eval else []
    predicts = ([data.read(split) for split in task.predict_splits()] if settings.do_predict
                else [])
    replicas = run.strategy.num_replicas_in_sync
    check_batch_split(settings, replicas)
    num_train_steps, num_warmup_steps, steps_per_epoch, training = 1, 0, 0.0, None
    if train is not None:
        examples = task.num_train_examples(train)
        num_train_steps, num_warmup_steps = schedule(settings, examples)
        steps_per_epoch = examples / settings.train_batch_size
        training = {"init_checkpoint": settings.init_checkpoint,
                    "learning_rate": settings.learning_rate,
                    "train_batch_size": settings.train_batch_size,
                    "num_train_steps": num_train_steps, "num_warmup_steps": num_warmup_steps,
                    "random_seed": settings.random_seed}
        check_run_config(settings.output_dir, identity, training)
    every = settings.eval_every_steps or steps_per_epoch or num_train_steps
    trainer = build_trainer(lambda: task.build_model(config), task, run.strategy, settings,
                            num_train_steps, num_warmup_steps, callback_every_steps=every,
                            save_at_callbacks=True, checkpoint_iterator=False)
    if train is None:
        check_trained_weights(trainer, settings.use_best_checkpoint)
    open_output(run, settings)
    if run.chief:
        record_run_config(settings.output_dir, identity, training, best_metric=best_metric)
    interrupts.at("while converting the data to features")
    for split in [train, *evals, *predicts]:
        if split is not None:
            data.convert(split)
    output_lock.setup_done(settings.output_dir)  # from here on, what the run writes is kept
    logger.info("%s: %s on %d replica(s); %s", task.title,
                f"{describe(task, train, 'training ')}, {num_train_steps} steps "
                f"({num_warmup_steps} warmup)" if train else "no training", replicas,
                ", ".join(f"{split.name}: {describe(task, split)}" for split in evals)
                or "no evaluation")

    def predictions(split, batch_size):
        outputs = predict(trainer, task, split, batch_size, settings.random_seed,
                          batching)
        return task.predictions(split, outputs)

    evaluated = {}  # split name -> (step, predictions) of the last evaluation

    def evaluate() -> dict:
        interrupts.at(f"in the evaluation at step {trainer.global_step}")
        results = {}
        for i, split in enumerate(evals):
            predicted = predictions(split, settings.eval_batch_size)
            evaluated[split.name] = (trainer.global_step, predicted)
            scores = task.score(split, predicted)
            results.update({prefix(split.name, len(evals)) + k: v for k, v in scores.items()})
            losses = task.example_losses(split, predicted) if i == 0 else None
            if losses is not None:  # the original evaluated one split (MNLI: matched)
                results["loss"] = batch_mean_loss(losses, settings.eval_batch_size)
        return results

    if train is not None:
        train_and_evaluate(trainer, lambda context: task.dataset(
            train.features, _per_replica(context, settings.train_batch_size), True,
            settings.random_seed, context, batching), evaluate if evals else None, every,
            steps_per_epoch, best_metric)
    chosen, step = choose_weights(trainer, best_metric, trained=train is not None,
                                  evaluated=bool(evals), use_best=settings.use_best_checkpoint)
    logger.info("using %s", chosen)
    if evals and train is None:
        results = evaluate_and_record(trainer, evaluate, settings.output_dir, step)
        logger.info("evaluation of %s: %s", chosen, format_results(results))
    # Several JAX processes predict together (each step is one program over all of them): the
    # others compute what the chief writes. On TensorFlow the chief predicts alone.
    if not run.chief and processes_of(run.strategy) == 1:
        return
    interrupts.at("while writing the predictions")
    for split in evals:  # what the kept weights predict on the evaluation splits
        last_step, predicted = evaluated.get(split.name, (None, None))
        if train is None or last_step != step:  # else: these weights were just evaluated
            predicted = predictions(split, settings.eval_batch_size)
        if run.chief:
            task.write_eval_outputs(split, predicted, settings.output_dir)
            fault_points.reached("prediction")
    for split in predicts:
        predicted = predictions(split, settings.predict_batch_size)
        if not run.chief:
            continue
        path = task.write_predictions(split, predicted, settings.output_dir)
        logger.info("predictions for %s: %s", split.name, path)
        fault_points.reached("prediction")
        if split.labelled:  # full precision: a threshold found here is pasted back as a flag
            log_results(task.score(split, predicted), logger,
                        f"Scores of the predictions for {split.name}")
    if settings.export_dir and run.chief:
        from bert_tf2.engine import export

        interrupts.at(f"while exporting the SavedModel to {settings.export_dir}")

        export.save(task.serving_module(trainer.model, vocab_file), settings.export_dir,
                    {"vocab.txt": vocab_file}, litert=settings.export_litert)
    if settings.export_keras_hub and run.chief:
        from bert_tf2.modeling import keras_hub_preset

        interrupts.at(f"while writing the KerasHub preset to {settings.export_keras_hub}")
        keras_hub_preset.save_preset(trainer.model, settings.export_keras_hub, vocab_file,
                                     settings.do_lower_case, settings.max_seq_length,
                                     settings.keras_hub_approximate_gelu)


# ------------------------------------------------------------------------------------ settings
def check_settings(settings: FinetuneSettings) -> None:
    """Usage errors of any fine-tuning run, before anything slow happens."""
    from bert_tf2.engine.build import check_backend

    check_backend()
    if not settings.output_dir:
        raise SettingsError("--output_dir is required")
    if not (settings.do_train or settings.do_eval or settings.do_predict or settings.export_dir
            or settings.export_keras_hub):
        raise SettingsError("nothing to do: set --do_train, --do_eval, --do_predict, "
                            "--export_dir or --export_keras_hub")
    if (settings.do_train or not settings.init_checkpoint) and not (
            settings.init_checkpoint or settings.bert_config_file):
        raise SettingsError("--bert_config_file or --init_checkpoint is required")
    if settings.pack_examples and not environment.uses_tensorflow():
        raise SettingsError(f"--pack_examples runs on TensorFlow only (KERAS_BACKEND="
                            f"{environment.backend()}); leave it out, or run with "
                            f"KERAS_BACKEND=tensorflow")
    if settings.export_dir and not environment.uses_tensorflow():
        raise SettingsError(f"--export_dir writes a TensorFlow SavedModel: not on "
                            f"KERAS_BACKEND={environment.backend()}. Train here, then export "
                            f"where TensorFlow is installed with the same command, --do_train "
                            f"left out and --export_dir={settings.export_dir} "
                            f"(docs/backends.md#exporting)")
    if settings.pack_examples and settings.num_accumulation_steps > 1:
        raise SettingsError("--pack_examples cannot be combined with --num_accumulation_steps "
                            "(packed batches have no fixed number of rows to split)")


def prefix(split_name: str, num_splits: int) -> str:
    """Evaluation keys: `eval_NAME` for one split, `eval_SPLIT_NAME` for several (MNLI)."""
    return "eval_" if num_splits == 1 else f"eval_{split_name}_"


def check_best_metric(task, metric: str) -> None:
    """A usage error, before any training, when `metric` is not a key evaluation writes (a
    task's name may be a pattern, `*` standing for a name the data gives, as NER's entity
    types)."""
    names = task.metric_names()
    splits = task.eval_splits()
    if names is None:
        if not metric.startswith("eval_"):
            raise SettingsError(f"--best_metric={metric}: evaluation keys start with eval_")
        return
    keys = sorted(prefix(split.name, len(splits)) + name for split in splits for name in names)
    if not any(fnmatch.fnmatchcase(metric, key) for key in keys):
        note = " (* stands for a name the data gives)" if any("*" in key for key in keys) else ""
        raise SettingsError(f"--best_metric={metric}: evaluation writes {', '.join(keys)}{note}")


def schedule(settings: FinetuneSettings, num_examples: int) -> tuple[int, int]:
    """The original's step arithmetic: (num_train_steps, num_warmup_steps)."""
    num_train_steps = settings.num_train_steps or int(
        num_examples / settings.train_batch_size * settings.num_train_epochs)
    if num_train_steps < 1:
        raise SettingsError(f"{num_examples} training examples at batch "
                            f"{settings.train_batch_size} for {settings.num_train_epochs} epochs "
                            f"make no training step")
    num_warmup_steps = (settings.num_warmup_steps if settings.num_warmup_steps is not None
                        else int(num_train_steps * settings.warmup_proportion))
    return num_train_steps, num_warmup_steps


def batch_mean_loss(losses: np.ndarray, batch_size: int) -> float:
    """Estimator's `loss` evaluation key: the mean over batches of each batch's mean loss (the
    last, shorter batch counts as much as the others)."""
    means = [np.mean(losses[i:i + batch_size]) for i in range(0, len(losses), batch_size)]
    return float(np.mean(means))


def describe(task, split, what: str = "") -> str:
    """'3668 training examples', '120 questions in 161 windows' for the log."""
    text = f"{len(split.examples)} {what}{task.unit}s"
    if task.row_unit:
        text += f" in {split.rows} {task.row_unit}s"
    return text


def _per_replica(context, global_batch: int) -> int:
    return context.get_per_replica_batch_size(global_batch) if context else global_batch


def batching_of(settings: FinetuneSettings, strategy):
    """The batch shapes the settings ask for; TPUs get full-width rows, one example each. Trimmed
    widths are exact (multiples of 1) on CPUs without XLA, multiples of 32 where every step is
    XLA-compiled (one compile per width), else (GPUs without XLA) multiples of 8."""
    from bert_tf2.data_gen.batching import (
        BUCKET_WINDOW,
        LENGTH_MULTIPLE,
        XLA_LENGTH_MULTIPLE,
        Batching,
    )

    tpu = _is_tpu(strategy)
    # Several JAX processes assemble one global batch from their shares: one width for all.
    trim = settings.trim_padding and not tpu and processes_of(strategy) == 1
    # Off TensorFlow every step is XLA-compiled, once per shape: few widths, few compiles.
    compiled = not environment.uses_tensorflow() or settings.jit_compile or tpu
    exact = not compiled and not _uses_gpu(strategy)
    return Batching(trim=trim, bucket_window=BUCKET_WINDOW if trim and settings.bucket_by_length
                    else 0, pack=settings.pack_examples and not tpu,
                    width_multiple=1 if exact else XLA_LENGTH_MULTIPLE if compiled
                    else LENGTH_MULTIPLE)


def _uses_gpu(strategy) -> bool:
    import tensorflow as tf

    try:
        devices = strategy.extended.worker_devices
    except (RuntimeError, NotImplementedError):  # the default strategy: wherever TF places ops
        return bool(tf.config.list_logical_devices("GPU"))
    return any("GPU" in device.upper() for device in devices)


def _is_tpu(strategy) -> bool:
    """TPUs want one static shape: no trimmed batches there."""
    if isinstance(strategy, KerasStrategy):
        return strategy.name == "tpu"
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.TPUStrategy)


# ------------------------------------------------------------------------------------ splits
class SplitReader:
    """Each split read once (`read`: its examples, nothing written) and its features converted
    once (`convert`: a cached TFRecord file in the work folder), then held in memory; a split
    asked for twice (SQuAD evaluates and predicts one file) is read and converted once."""

    def __init__(self, task, identity: dict, vocab_file: str, work_dir: str):
        self.task = task
        self.identity = identity
        self.vocab_file = vocab_file
        self.work_dir = work_dir
        self.splits = {}

    def read(self, split):
        if split.name not in self.splits:
            split.examples = self.task.read(split)
            self.splits[split.name] = split
        return self.splits[split.name]

    def convert(self, split) -> None:
        from bert_tf2.data_gen import feature_cache

        if split.features is not None:
            return
        key = feature_cache.fingerprint([*split.files, self.vocab_file], **split.cache_settings,
                                        **self.identity)
        path = os.path.join(self.work_dir, f"{split.name}.tf_record")
        feature_cache.cached_records(path, key, lambda: self.task.records(split),
                                     what=f"{split.name} features")
        split.features = self.task.load_features(path)


def predict(trainer, task, split, batch_size: int, seed: int, batching) -> dict:
    """The task's `predict_step` outputs for every row of `split`, in row order (rows are
    renumbered for the pass, so that any sharding of the input gives them back in order)."""
    rows = split.rows
    features = dict(split.features, example_index=np.arange(rows, dtype=np.int32))
    outputs = trainer.predict(lambda context: task.dataset(
        features, _per_replica(context, batch_size), False, seed, context, batching))
    real = outputs["example_index"] >= 0  # padding rows (several replicas) are -1
    index = outputs["example_index"][real]
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(rows)):
        raise RuntimeError(f"prediction lost or repeated rows of {split.name}")
    return {name: value[real][order] for name, value in outputs.items()}


# ------------------------------------------------------------------------------------ the loop
def train_and_evaluate(trainer, train_dataset_fn: Callable, evaluate: Callable[[], dict] | None,
                       every: float, steps_per_epoch: float = 0,
                       best_metric: str | None = None) -> dict | None:
    """Train to the last step, evaluating every `every` steps (rounded) and at the last one;
    returns the last evaluation. `evaluate()` returns the task's metrics for the model as it
    stands (`eval_` prefixed keys); `best_metric` names the one to keep the best weights by.

    Each evaluation happens exactly once, whatever the kill point: the checkpoint of an
    evaluation step is saved first, then the evaluation offers its weights to `best/`, and only
    then is `eval_results.txt` written with that step. A run that resumes at an evaluation step
    whose results are not in `eval_results.txt` was stopped in between: it evaluates the restored
    weights (the same weights) before training on, so `best/` and the results end as an
    uninterrupted run's.
    """
    best = BestCheckpoint(trainer.work_dir, best_metric) if best_metric else None
    last = {}
    num_train_steps = trainer.config.num_train_steps
    output_dir = trainer.config.output_dir

    def evaluates_at(step):
        return evaluate is not None and step > 0 and (is_boundary(step, every)
                                                      or step >= num_train_steps)

    def evaluate_now(step):
        results = evaluate_and_record(trainer, evaluate, output_dir, offer=best.offer
                                      if best is not None else None)
        epoch = step / steps_per_epoch if steps_per_epoch else None
        logger.info("evaluation at step %d%s: %s", step,
                    f" (epoch {epoch:.2f})" if epoch else "", format_results(results))
        last.clear()
        last.update(results)

    def on_loop_end(step, train_metrics):
        if evaluates_at(step):
            evaluate_now(step)

    def on_resume(step):
        if evaluates_at(step) and recorded_step(output_dir) != step:
            logger.info("the evaluation at step %d did not finish before the run was stopped: "
                        "evaluating the restored weights now", step)
            evaluate_now(step)

    trainer.train(train_dataset_fn, on_loop_end, on_resume)
    return last or None


def recorded_step(output_dir: str) -> int | None:
    """The step of the evaluation in `eval_results.txt` (None when there is none)."""
    step = read_eval_results(os.path.join(output_dir, RESULTS_FILE)).get("global_step")
    return None if step is None else int(step)


def evaluate_and_record(trainer, evaluate: Callable[[], dict], output_dir: str,
                        step: int | None = None, offer: Callable | None = None) -> dict:
    """Run `evaluate()`, add `global_step` (the trainer's, unless `step` says which weights
    these are), offer the results to `best/` (`offer(write_weights, results)`), then write
    eval_results.txt and TensorBoard's eval/; eval_results.txt is written last, so that its
    step says the whole evaluation was recorded. Nothing is recorded before the checkpoint being
    written in the background (that of this step, during training) is complete."""
    step = trainer.global_step if step is None else step
    results = dict(evaluate())
    trainer.wait_for_checkpoint()  # the step's checkpoint (written meanwhile) comes first
    fault_points.reached("evaluation")
    trainer.write_summary("eval", results, step)
    results["global_step"] = step
    if offer is not None:
        offer(trainer.write_weights, results)
    fault_points.reached("eval_results")
    if trainer.is_chief:
        write_eval_results(os.path.join(output_dir, RESULTS_FILE), results)
        log_results(results, logger)
        evaluation_gate.wait(step)  # a search reads it (and may stop the run) before it goes on
    return results


def choose_weights(trainer, best_metric: str, trained: bool, evaluated: bool,
                   use_best: bool) -> tuple[str, int]:
    """Load the weights that evaluation, prediction and export should use into the model.

    After training: the best weights (`best/`, when `use_best` and this run evaluated), else the
    weights just trained. Without training: `--init_checkpoint` when it holds the head too (a
    fine-tuned checkpoint the user named, as the original's predict step passes
    `--init_checkpoint=$OUTPUT_DIR/model.ckpt-N`), else the best weights (when `use_best`), else
    the newest training checkpoint in the output folder. Returns what was chosen (for the log)
    and its step (an `--init_checkpoint`'s own: the original's `global_step`, or the step a
    runner saved it at).
    """
    best = BestCheckpoint(trainer.work_dir, best_metric)
    report = trainer.init_report
    if trained:
        if use_best and evaluated and best.restore(trainer.model):
            return _best_description(best, best_metric)
        return f"the weights after step {trainer.global_step}", trainer.global_step
    if report is not None and not report.initialised:
        from bert_tf2.modeling.checkpoints import checkpoint_step

        step = checkpoint_step(trainer.init_checkpoint)
        return f"--init_checkpoint {report.source}", step if step is not None else 0
    if use_best and best.restore(trainer.model):
        return _best_description(best, best_metric)
    latest = trainer.restore_latest()
    if latest:
        return f"training checkpoint {latest}", trainer.global_step
    raise no_trained_weights(trainer)


def check_trained_weights(trainer, use_best: bool) -> None:
    """Before a run that does not train writes anything: some weights with a trained head must
    be there for `choose_weights` to find (else the run is refused, having written nothing)."""
    report = trainer.init_report
    if report is not None and not report.initialised:
        return
    if use_best and BestCheckpoint(trainer.work_dir, "").exists():
        return
    if trainer.latest_checkpoint():
        return
    raise no_trained_weights(trainer)


def no_trained_weights(trainer) -> NoTrainedWeightsError:
    report = trainer.init_report
    return NoTrainedWeightsError(
        f"no trained weights: {trainer.config.output_dir} has no checkpoint and "
        f"--init_checkpoint lacks {', '.join(report.initialised) if report else 'the head'}; "
        f"train first (--do_train)")


def _best_description(best, best_metric: str) -> tuple[str, int]:
    step = int(best.results.get("global_step", 0))
    return f"the best weights ({best_metric} = {best.score:.4f} at step {step})", step
