"""The steps every fine-tuning runner's `main` takes, around its own data and metrics.

A runner (`run_classifier.py`, `run_squad.py`, ...) reads its task's data and defines how to score
a model; everything else is here, once: the set-up (logging, usage checks, the model's config and
vocabulary, seeds, precision, the distribution strategy and which worker writes outputs), the
`run_config.json` guard against mixing runs in one `--output_dir`, and the fit itself (train with
evaluation, keep the best weights, choose the weights that prediction and export use, evaluate
them when not training). Reads the flags of `finetuning_flags`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

from absl import app, flags

import finetuning_flags
import runner_flags

FLAGS = flags.FLAGS
logger = logging.getLogger("finetuning")


@dataclasses.dataclass
class Run:
    config: object  # BertConfig
    vocab_file: str
    strategy: object
    work_dir: str  # the chief's output_dir; other workers' scratch
    chief: bool

    @property
    def trim(self) -> bool:
        """Cut batches to their longest row: not on TPUs, which want one static shape."""
        import tensorflow as tf

        return FLAGS.trim_padding and not isinstance(self.strategy,
                                                     tf.distribute.TPUStrategy)


def set_up(required: tuple = ()) -> Run:
    """Usage checks, logging, seeds, precision and strategy; `required` names flags that must
    be set."""
    import keras

    from modeling.distribution import set_precision
    from modeling.training import worker_dir

    runner_flags.setup_logging()
    finetuning_flags.check_common()
    for name in required:
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    config, vocab_file = finetuning_flags.model_files()
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise app.UsageError(f"--max_seq_length={FLAGS.max_seq_length} exceeds the model's "
                             f"max_position_embeddings={config.max_position_embeddings}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    keras.utils.set_random_seed(FLAGS.random_seed)
    set_precision(FLAGS.dtype)
    strategy = finetuning_flags.strategy()
    work_dir = worker_dir(strategy, FLAGS.output_dir)
    os.makedirs(work_dir, exist_ok=True)
    return Run(config, vocab_file, strategy, work_dir, chief=work_dir == FLAGS.output_dir)


def record_run(identity: dict, options=None) -> None:
    """Refuse an `output_dir` holding another run (`identity`: what decides the features and
    the head), then record this one; `options` (FinetuneOptions, when training) adds the
    training settings a resumed run must share."""
    from modeling import finetuning

    training = None
    if options is not None:
        training = {"init_checkpoint": FLAGS.init_checkpoint,
                    "learning_rate": options.learning_rate,
                    "train_batch_size": options.train_batch_size,
                    "num_train_steps": options.num_train_steps,
                    "num_warmup_steps": options.num_warmup_steps,
                    "random_seed": FLAGS.random_seed}
    try:
        finetuning.check_run_config(FLAGS.output_dir, identity, training)
    except finetuning.RunConfigError as e:
        raise app.UsageError(str(e)) from None


def dataset_fn(make_dataset: Callable, features: dict, global_batch: int, is_training: bool,
               trim: bool) -> Callable:
    """What `Trainer` takes: a function of the input context that builds the task's batches
    (`make_dataset(features, per_replica_batch, is_training, seed, input_context, trim)`, e.g.
    `classifier_features.classifier_dataset`) for one input pipeline."""
    def make(context):
        batch = context.get_per_replica_batch_size(global_batch) if context else global_batch
        return make_dataset(features, batch, is_training, seed=FLAGS.random_seed,
                            input_context=context, trim=trim)
    return make


def fit(trainer, train_dataset_fn: Callable | None, evaluate: Callable[[], dict] | None,
        options, best_metric: str) -> int:
    """Train (when `train_dataset_fn`) evaluating at every interval, then load the weights that
    predictions and export should use, and evaluate them if training did not. Returns their
    step."""
    from modeling import finetuning

    if train_dataset_fn is not None:
        finetuning.train_and_evaluate(trainer, train_dataset_fn, evaluate, options,
                                      best_metric if evaluate else None)
    try:
        weights, step = finetuning.choose_weights(
            trainer, best_metric, trained=train_dataset_fn is not None,
            evaluated=evaluate is not None, use_best=FLAGS.use_best_checkpoint)
    except finetuning.NoTrainedWeightsError as e:
        raise app.UsageError(str(e)) from None
    logger.info("using %s", weights)
    if evaluate is not None and train_dataset_fn is None:
        results = finetuning.evaluate_and_record(trainer, evaluate, FLAGS.output_dir, step)
        logger.info("evaluation of %s: %s", weights, finetuning.format_results(results))
    return step
