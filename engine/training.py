"""The training and evaluation loop every runner shares.

A `Trainer` runs a task's loss on batches from a `tf.data` dataset under a `tf.distribute` strategy:
`steps_per_loop` updates inside one `tf.function` (the original's `iterations_per_loop`), optional
gradient accumulation (k micro-batches, one averaged update, so the schedule advances once per real
update), optional XLA (`jit_compile`) for the forward/backward pass, loss scaling under
mixed_float16. Every `save_checkpoints_steps` it writes a checkpoint of the model, the optimiser
(with its step) and, on one replica, the input iterator's state, keeping the newest
`keep_checkpoint_max`; a new Trainer on the same `output_dir` resumes from the newest one in the
same data order (several replicas, or `checkpoint_iterator=False`: the seeded input pipeline is
rebuilt and the batches already consumed are skipped, since TensorFlow cannot checkpoint a
distributed iterator). A non-finite loss stops the run before anything is saved, naming the step
and the last good checkpoint. Loops can also end at chosen steps (`callback_every_steps`, e.g.
each epoch's end), where `on_loop_end` evaluates, and `predict` collects a task's outputs.

A task supplies `loss_and_metrics(model, batch, training) -> (loss, {name: (sum, count)})`: the
metrics are ratios of sums, added across replicas and steps, so they are exact over any number of
batches and devices. For `predict` it supplies `predict_step(model, batch) -> {name: tensor}`.
"""
from __future__ import annotations

import logging
import math
import os
import time
from typing import Callable, Protocol

import keras
import tensorflow as tf

from bert_tf2.engine.trainer_config import (  # noqa: F401
    CHECKPOINT_NAME,
    CHECKPOINT_PREFIXES,
    EmptyInputError,
    NonFiniteLossError,
    TrainerConfig,
    is_boundary,
    is_chief,
    is_training_checkpoint,
    next_boundary,
    ratios,
    remove_partial_checkpoints,
    worker_dir,
)
from bert_tf2.process import fault_points, interrupts
from bert_tf2.process.progress import format_duration

logger = logging.getLogger(__name__)


class Task(Protocol):
    def loss_and_metrics(self, model, batch, training: bool): ...

    # Optional, for `Trainer.predict`: the outputs to collect from one batch, a dict of tensors.
    def predict_step(self, model, batch): ...


def _metric_sums(loss, metrics: dict) -> dict:
    """A task's loss and (sum, count) metrics as float32 [sum, count] pairs, ready to be added
    across micro-batches, replicas and steps; the loss counts as one per batch."""
    metrics = {"loss": (loss, tf.constant(1.0)), **metrics}
    return {k: tf.stack([tf.cast(s, tf.float32), tf.cast(c, tf.float32)])
            for k, (s, c) in metrics.items()}


class Trainer:
    """Trains `model` with `optimizer` on `task`; both must be created under `strategy.scope()`."""

    def __init__(self, model, optimizer, task: Task, strategy, config: TrainerConfig):
        if config.num_accumulation_steps < 1:
            raise ValueError("num_accumulation_steps must be at least 1")
        self.model = model
        self.optimizer = optimizer
        self.task = task
        self.strategy = strategy
        self.config = config
        self._grads = tf.function(self._replica_gradients, jit_compile=config.jit_compile,
                                  reduce_retracing=True)
        self._apply = self._apply_gradients
        if config.compile_optimizer and strategy.num_replicas_in_sync == 1 and not isinstance(
                strategy, tf.distribute.TPUStrategy):
            self._apply = self._compiled_apply(optimizer)
        self._writers = {}
        self.is_chief = is_chief(strategy)
        # The optimiser's slots are made now, under the strategy: made lazily inside the first
        # training step, several local replicas (MirroredStrategy) fail ("You must feed a value
        # for placeholder tensor ...").
        if not optimizer.built:
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        # Every worker takes part in saving a checkpoint (it is a collective operation); only the
        # chief's copy lands in output_dir, the others write to a scratch folder of their own.
        self.work_dir = worker_dir(strategy, config.output_dir)
        # Set by Ctrl-C or SIGTERM (`process.interrupts`) from another thread: a training loop
        # stops after the step it is in, not after `steps_per_loop` steps. Not checkpointed.
        self._stop = tf.Variable(False, trainable=False, name="stop_requested")

    # ------------------------------------------------------------------------- replica math
    def _replica_gradients(self, batch):
        """Gradients of the task loss on one (micro-)batch of this replica, and its metrics."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss, metrics = self.task.loss_and_metrics(self.model, batch, training=True)
            # The optimiser sums gradients over replicas: scale so the sum is the mean.
            scaled = loss / self.strategy.num_replicas_in_sync
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                scaled = self.optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        if self.config.num_accumulation_steps > 1:  # embedding gathers give IndexedSlices
            grads = [tf.convert_to_tensor(g) for g in grads]
        return grads, _metric_sums(loss, metrics)

    def _replica_update(self, batch):
        k = self.config.num_accumulation_steps
        if k == 1:
            grads, metrics = self._grads(batch)
        else:
            micro = tf.nest.map_structure(
                lambda x: tf.reshape(x, tf.concat([[k, -1], tf.shape(x)[1:]], 0)), batch)
            grads, metrics = self._grads(tf.nest.map_structure(lambda x: x[0], micro))
            for i in tf.range(1, k):
                g, m = self._grads(tf.nest.map_structure(lambda x: x[i], micro))
                grads = [a + b for a, b in zip(grads, g)]
                metrics = {name: metrics[name] + m[name] for name in metrics}
            grads = [g / k for g in grads]
        self._apply(grads)
        return metrics

    def _apply_gradients(self, grads):
        self.optimizer.apply(grads, self.model.trainable_variables)

    def _compiled_apply(self, optimizer):
        """The update XLA-compiled (one device): the optimiser's own (`compiled_apply`, with the
        original's clip), or else any Keras optimiser's `apply` on dense gradients (an
        embedding's IndexedSlices would compile it again for every batch width)."""
        if hasattr(optimizer, "compiled_apply"):  # AdamWeightDecay, Lamb
            return optimizer.compiled_apply(self.model.trainable_variables)
        compiled = tf.function(self._apply_gradients, jit_compile=True)
        return lambda grads: compiled([None if g is None else tf.convert_to_tensor(g)
                                       for g in grads])

    def _sum_over_replicas(self, per_replica):
        return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in per_replica.items()}

    @tf.function
    def _train_loop(self, iterator, num_steps):
        totals = self._sum_over_replicas(self.strategy.run(self._replica_update,
                                                           args=(next(iterator),)))
        for _ in tf.range(num_steps - 1):
            if self._stop.read_value():
                break
            step = self._sum_over_replicas(self.strategy.run(self._replica_update,
                                                             args=(next(iterator),)))
            totals = {k: totals[k] + step[k] for k in totals}
        return totals

    @tf.function(reduce_retracing=True)
    def _predict_step(self, batch):
        outputs = self.strategy.run(lambda b: self.task.predict_step(self.model, b), args=(batch,))
        return {k: self.strategy.gather(v, axis=0) for k, v in outputs.items()}

    @tf.function
    def _single_predict_step(self, batch):
        return self.task.predict_step(self.model, batch)

    @tf.function(reduce_retracing=True)
    def _eval_step(self, batch):
        def replica(batch):
            return _metric_sums(*self.task.loss_and_metrics(self.model, batch, training=False))
        return self._sum_over_replicas(self.strategy.run(replica, args=(batch,)))

    # ------------------------------------------------------------------------- bookkeeping
    @property
    def global_step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def _checkpoint(self, iterator=None):
        # Keras keeps dropout's random state in seed-generator variables that tf.train.Checkpoint
        # does not reach through the model; without them a resumed run draws other masks.
        objects = {"model": self.model, "optimizer": self.optimizer,
                   "random_state": [v.value for v in self.model.non_trainable_variables]}
        if iterator is not None:
            objects["train_iterator"] = iterator
        checkpoint = tf.train.Checkpoint(**objects)
        manager = tf.train.CheckpointManager(checkpoint, self.work_dir,
                                             max_to_keep=self.config.keep_checkpoint_max,
                                             checkpoint_name=CHECKPOINT_NAME)
        return checkpoint, manager

    def _summary(self, kind: str, values: dict, step: int) -> None:
        if not self.is_chief:
            return
        if kind not in self._writers:
            self._writers[kind] = tf.summary.create_file_writer(
                os.path.join(self.config.output_dir, kind))
        with self._writers[kind].as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        self._writers[kind].flush()

    def current_learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    # ------------------------------------------------------------------------- public
    def train(self, dataset_fn: Callable, on_loop_end: Callable | None = None,
              on_resume: Callable | None = None) -> dict:
        """Train to `num_train_steps` updates from wherever the newest checkpoint left off.

        `dataset_fn(input_context)` returns this input pipeline's dataset, batched per replica
        with `num_accumulation_steps` micro-batches per element. `on_loop_end(step, metrics)`
        runs after each loop (and its checkpoint); `on_resume(step)` runs once after a checkpoint
        is restored, before training goes on (to finish what a killed run left undone at that
        step). Returns the last loop's metrics.
        """
        cfg = self.config
        single = (self.strategy.num_replicas_in_sync == 1) and cfg.checkpoint_iterator
        iterator = iter(dataset_fn(tf.distribute.InputContext())) if single else None
        for path in remove_partial_checkpoints(self.work_dir):
            logger.info("removed %s, a partial checkpoint left by an interrupted run", path)
        checkpoint, manager = self._checkpoint(iterator)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
            logger.info("resumed from %s at step %d", manager.latest_checkpoint, self.global_step)
            interrupts.rerun(f"resumes from {manager.latest_checkpoint} "
                             f"(step {self.global_step})")
            if on_resume:
                on_resume(self.global_step)
        step = self.global_step
        if not single:
            iterator = iter(self._input(dataset_fn, skip_updates=step))
        self._stop.assign(False)
        stop = lambda: self._stop.assign(True)  # noqa: E731
        interrupts.on_signal(stop)
        try:
            return self._train_to_end(iterator, checkpoint, manager, step, on_loop_end)
        finally:
            interrupts.forget(stop)

    def _train_to_end(self, iterator, checkpoint, manager, step: int,
                      on_loop_end: Callable | None) -> dict:
        cfg = self.config
        metrics = {}
        where = lambda: f"at training step {self.global_step} of {cfg.num_train_steps}"  # noqa
        while step < cfg.num_train_steps:
            interrupts.at(where)  # again after each evaluation, which says its own
            n = min(cfg.steps_per_loop, cfg.num_train_steps - step,
                    cfg.save_checkpoints_steps - step % cfg.save_checkpoints_steps,
                    next_boundary(step, cfg.callback_every_steps) - step)
            start = time.time()
            totals = self._train_loop(iterator, tf.constant(n))
            metrics = ratios(totals)
            elapsed = time.time() - start
            step = self.global_step
            if not math.isfinite(metrics["loss"]):
                raise NonFiniteLossError(
                    f"{cfg.output_dir}: the loss is {metrics['loss']} in the {n} steps ending at "
                    f"step {step}; stopped without saving (last good checkpoint: "
                    f"{manager.latest_checkpoint or 'none'}). Lower --learning_rate or check the "
                    f"data, then run again")
            lr = self.current_learning_rate()
            speed = cfg.examples_per_step * n / elapsed if cfg.examples_per_step else 0.0
            self._summary("train", {**metrics, "learning_rate": lr,
                                    "examples_per_second": speed}, step)
            eta = (cfg.num_train_steps - step) * elapsed / n
            logger.info("step %d/%d | %s | lr %.3g | %.1f examples/s | eta %s", step,
                        cfg.num_train_steps,
                        " | ".join(f"{k} {v:.4f}" for k, v in metrics.items()), lr, speed,
                        format_duration(eta))
            fault_points.reached("train_loop")
            if (step % cfg.save_checkpoints_steps == 0 or step >= cfg.num_train_steps
                    or (cfg.save_at_callbacks and is_boundary(step, cfg.callback_every_steps))):
                fault_points.reached("checkpoint_write", self.work_dir)
                try:
                    path = manager.save(checkpoint_number=step)
                except BaseException:  # a full disk, say: leave no partial checkpoint behind
                    remove_partial_checkpoints(self.work_dir)
                    raise
                logger.info("saved %s", path)
                interrupts.rerun(f"resumes from {path} (step {step})")
            if on_loop_end:
                on_loop_end(step, metrics)
        return metrics

    def evaluate(self, dataset_fn: Callable, max_steps: int | None = None) -> dict:
        """Metrics over a finite dataset (or its first `max_steps` batches), summed exactly."""
        dataset = self._input(dataset_fn)
        totals = None
        for i, batch in enumerate(dataset):
            if max_steps is not None and i >= max_steps:
                break
            step = self._eval_step(batch)
            totals = step if totals is None else {k: totals[k] + step[k] for k in totals}
        if totals is None:
            raise EmptyInputError("evaluation dataset is empty")
        metrics = ratios(totals)
        self._summary("eval", metrics, self.global_step)
        return metrics

    def predict(self, dataset_fn: Callable) -> dict:
        """The task's `predict_step` outputs over a finite dataset, as NumPy arrays in order.

        On one replica the batches go straight to one trace of the step, made for the dataset's
        own (unknown-width) shapes: a distributed dataset and a retrace per new shape would add
        2-5 s to every evaluation of a GLUE dev split."""
        import numpy as np

        dataset = self._input(dataset_fn)
        if self.strategy.num_replicas_in_sync == 1:
            step = self._single_predict_step.get_concrete_function(dataset.element_spec)
            chunks = [step(batch) for batch in dataset]
        else:
            chunks = [self._predict_step(batch) for batch in dataset]
        if not chunks:
            raise ValueError("prediction dataset is empty")
        return {k: np.concatenate([c[k].numpy() for c in chunks]) for k in chunks[0]}

    def _input(self, dataset_fn: Callable, skip_updates: int = 0):
        """What a loop reads, after the batches of `skip_updates` updates: on one replica the
        dataset itself, on several a distributed dataset. Why not a distributed one on one
        replica too: its own pipeline does not carry the dataset's options and runs tf.data's
        autotuning model, whose thread can hold the iterator's deletion, at the end of training,
        for up to a minute (issue 29; `data_gen.datasets.without_autotune_model`)."""
        if self.strategy.num_replicas_in_sync == 1:
            dataset = dataset_fn(tf.distribute.InputContext())
            return dataset.skip(skip_updates) if skip_updates else dataset
        return self.strategy.distribute_datasets_from_function(
            lambda context: dataset_fn(context).skip(skip_updates * _elements_per_update(context)))

    def restore_latest(self) -> str | None:
        """Restore model and optimiser from the newest checkpoint in output_dir (no iterator)."""
        checkpoint, manager = self._checkpoint()
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).expect_partial()
        return manager.latest_checkpoint


def _elements_per_update(context) -> int:
    """Dataset elements one update takes from each input pipeline: one per local replica."""
    return max(1, context.num_replicas_in_sync // context.num_input_pipelines)
