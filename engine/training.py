"""The TensorFlow backend of the training loop (`engine.training_loop.TrainingLoop`, which holds
the loop itself: resume, loop boundaries, the NaN stop, logging, summaries, checkpoint cadence,
exact evaluation sums; the JAX backend is `engine.keras_training`).

A `Trainer` runs a task's loss on batches from a `tf.data` dataset under a `tf.distribute` strategy:
`steps_per_loop` updates inside one `tf.function` (the original's `iterations_per_loop`), optional
gradient accumulation (k micro-batches, one averaged update, so the schedule advances once per real
update; with a batch-size ramp k is a variable the loop sets, one replica only), optional XLA (`jit_compile`) for the forward/backward pass, loss scaling under
mixed_float16. Every `save_checkpoints_steps` it writes a checkpoint of the model, the optimiser
(with its step) and, on one replica, the input iterator's state, keeping the newest
`keep_checkpoint_max`; a new Trainer on the same `output_dir` resumes from the newest one in the
same data order (several replicas, or `checkpoint_iterator=False`: the seeded input pipeline is
rebuilt and the batches already consumed are skipped, since TensorFlow cannot checkpoint a
distributed iterator). A non-finite loss stops the run before anything is saved, naming the step
and the last good checkpoint. Loops can also end at chosen steps (`callback_every_steps`, e.g.
each epoch's end), where `on_loop_end` evaluates, and `predict` collects a task's outputs.

The steps are traced without AutoGraph (`tf.function(autograph=False)`; the loops are written as
`tf.while_loop`): converting the model's and the task's Python to graph code took about 0.8 s of
every run's start (a tiny classifier's run: 4.3 s of CPU instead of 5.1 s), and none of it needs
converting, since their Python branches only on shapes and settings.

A task supplies `loss_and_metrics(model, batch, training) -> (loss, {name: (sum, count)})`: the
metrics are ratios of sums, added across replicas and steps, so they are exact over any number of
batches and devices. For `predict` it supplies `predict_step(model, batch) -> {name: tensor}`.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Callable, Protocol

import keras
import tensorflow as tf

from bert_tf2.data_gen.datasets import without_autotune_model
from bert_tf2.engine.trainer_config import (  # noqa: F401
    CHECKPOINT_NAME,
    CHECKPOINT_PREFIXES,
    EmptyInputError,
    NonFiniteLossError,
    TrainerConfig,
    is_chief,
    is_training_checkpoint,
    remove_partial_checkpoints,
    worker_dir,
)
from bert_tf2.engine.training_loop import TrainingLoop
from bert_tf2.process import fault_points
from bert_tf2.process.errors import SettingsError

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


def _micro_batch_spec(batch):
    """The spec of one of a batch's accumulated micro-batches (tensors or specs): any number of
    rows, the rest of each shape as the batch's."""
    return tf.nest.map_structure(
        lambda x: tf.TensorSpec(tf.TensorShape([None]).concatenate(x.shape[1:]), x.dtype), batch)


# The weights x steps from which an XLA-compiled update saves more than its compile costs: it
# saves about 3 ns per weight and step (MiniLM's 22.7 M weights: 0.120 -> 0.053 s an update),
# and compiling it takes 0.55 CPU-seconds for a 1 M-weight model and about 0.8 for MiniLM's
# (2 AVX-512 EPYC cores, 2026-11-29): so 12 steps of MiniLM took as long either way.
COMPILED_UPDATE_WEIGHT_STEPS = 5e8


def update_pays_for_its_compile(variables, num_train_steps: int) -> bool:
    """Whether `--compile_optimizer`, unset, compiles the update: where the run's weights times
    its steps reach COMPILED_UPDATE_WEIGHT_STEPS (BERT-Base from 5 steps, MiniLM from 23, a
    1 M-weight model from 500)."""
    weights = sum(math.prod(int(d) for d in v.shape) for v in variables)
    return weights * num_train_steps >= COMPILED_UPDATE_WEIGHT_STEPS


class Trainer(TrainingLoop):
    """Trains `model` with `optimizer` on `task`; both must be created under `strategy.scope()`."""

    def __init__(self, model, optimizer, task: Task, strategy, config: TrainerConfig):
        super().__init__(model, optimizer, task, strategy, config)
        self._grads = tf.function(self._replica_gradients, jit_compile=config.jit_compile,
                                  reduce_retracing=True, autograph=False)
        self._apply = self._apply_gradients
        compile_update = config.compile_optimizer
        if compile_update is None:
            compile_update = update_pays_for_its_compile(model.trainable_variables,
                                                         config.num_train_steps)
        if compile_update and strategy.num_replicas_in_sync == 1 and not isinstance(
                strategy, tf.distribute.TPUStrategy):
            self._apply = self._compiled_apply(optimizer)
        # The optimiser's slots are made now, under the strategy: made lazily inside the first
        # training step, several local replicas (MirroredStrategy) fail ("You must feed a value
        # for placeholder tensor ...").
        if not optimizer.built:
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        # Set by Ctrl-C or SIGTERM (`process.interrupts`) from another thread: a training loop
        # stops after the step it is in, not after `steps_per_loop` steps. Not checkpointed.
        self._stop = tf.Variable(False, trainable=False, name="stop_requested")
        if self.ramp:
            if strategy.num_replicas_in_sync > 1:
                raise SettingsError(
                    f"--batch_size_ramp trains on one replica on TensorFlow, not "
                    f"{strategy.num_replicas_in_sync}: on several devices use the JAX backend "
                    f"(KERAS_BACKEND=jax), or a fixed --num_accumulation_steps")
            # Set by the loop before each of its loops; not checkpointed (the budget sets it).
            self._micro_batches = tf.Variable(1, trainable=False, name="micro_batches")

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
            grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        return grads, _metric_sums(loss, metrics)

    def _replica_update(self, batch):
        k = self.config.num_accumulation_steps
        if k == 1:
            grads, metrics = self._grads(batch)
        else:
            micro = tf.nest.map_structure(
                lambda x: tf.reshape(x, tf.concat([[k, -1], tf.shape(x)[1:]], 0)), batch)

            def micro_batch(i):
                def one(x, whole):
                    part = x[i]
                    # the shape of `_micro_batch_spec(batch)`: the call reuses its trace
                    part.set_shape(_micro_batch_spec(whole).shape)
                    return part
                return tf.nest.map_structure(one, micro, batch)
            grads, metrics = self._averaged_gradients(micro_batch, k, _micro_batch_spec(batch))
        self._apply(grads)
        return metrics

    def _ramped_update(self, iterator):
        """One update of a batch-size ramp: `_micro_batches` input elements, their gradients
        averaged."""
        grads, metrics = self._averaged_gradients(lambda i: next(iterator),
                                                  self._micro_batches.read_value(),
                                                  iterator.element_spec)
        self._apply(grads)
        return metrics

    def _averaged_gradients(self, micro_batch: Callable, k, spec):
        """The gradients of `k` micro-batches (`micro_batch(i)`, i = 0 .. k-1, each of `spec`)
        averaged, and their metrics summed. The sums start at zero (0 + g is g exactly), shaped
        from the trace of `_grads` that the loop then calls, so the gradient is traced once in
        the loop's body, not also before it for the first micro-batch. A variable the loss does
        not reach (a head the task leaves unused) keeps a gradient of None."""
        grads, metrics = self._grads.get_concrete_function(spec).structured_outputs
        present = [i for i, g in enumerate(grads) if g is not None]
        variables = self.model.trainable_variables
        start = ([tf.zeros(variables[i].shape, grads[i].dtype) for i in present],
                 {name: tf.zeros([2]) for name in metrics})

        def add(i, sums, metrics):
            g, m = self._grads(micro_batch(i))
            return (i + 1, [a + g[p] for a, p in zip(sums, present)],
                    {name: metrics[name] + m[name] for name in metrics})

        _, sums, metrics = tf.while_loop(lambda i, *_: i < k, add, (tf.constant(0), *start))
        averaged = [None] * len(grads)
        for total, i in zip(sums, present):
            averaged[i] = total / tf.cast(k, total.dtype)
        return averaged, metrics

    def _apply_gradients(self, grads):
        self.optimizer.apply(grads, self.model.trainable_variables)

    def _compiled_apply(self, optimizer):
        """The update XLA-compiled (one device): the optimiser's own (`compiled_apply`, with the
        original's clip), or else any Keras optimiser's `apply` on dense gradients (an
        embedding's IndexedSlices would compile it again for every batch width)."""
        if hasattr(optimizer, "compiled_apply"):  # AdamWeightDecay, Lamb
            return optimizer.compiled_apply(self.model.trainable_variables)
        compiled = tf.function(self._apply_gradients, jit_compile=True, autograph=False)
        return lambda grads: compiled([None if g is None else tf.convert_to_tensor(g)
                                       for g in grads])

    def _sum_over_replicas(self, per_replica):
        return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in per_replica.items()}

    @tf.function(autograph=False)
    def _train_loop(self, iterator, num_steps):
        """`num_steps` updates (at least one; fewer if a stop is requested), their metric sums.

        The loop's sums start at zero, named before the loop is traced: on one replica from the
        trace of `_grads` that the loop's step then calls, on several from the step traced as a
        function of its own, which the loop then calls. (Taking a first step before the loop,
        for its names, traced and optimised the step twice: 0.45 of a tiny classifier run's
        4.05 CPU-seconds.)"""
        def step():
            if self.ramp:  # one replica: the update reads its micro-batches itself
                return self._sum_over_replicas(self.strategy.run(
                    lambda: self._ramped_update(iterator)))
            return self._sum_over_replicas(self.strategy.run(self._replica_update,
                                                             args=(next(iterator),)))

        def more(done, totals):
            return tf.logical_or(done < 1, tf.logical_and(
                done < num_steps, tf.logical_not(self._stop.read_value())))

        if self.strategy.num_replicas_in_sync == 1:
            spec = iterator.element_spec
            if self.config.num_accumulation_steps > 1 and not self.ramp:
                spec = _micro_batch_spec(spec)
            _, metrics = self._grads.get_concrete_function(spec).structured_outputs
        else:  # the step as a function of its own, traced once: for its names and the loop
            step = tf.function(step, autograph=False).get_concrete_function()
            metrics = step.structured_outputs

        def another(done, totals):
            update = step()
            return done + 1, {k: totals[k] + update[k] for k in totals}

        start = (tf.constant(0), {name: tf.zeros([2]) for name in metrics})
        return tf.while_loop(more, another, start)[1]

    @tf.function(reduce_retracing=True, autograph=False)
    def _predict_step(self, batch):
        outputs = self.strategy.run(lambda b: self.task.predict_step(self.model, b), args=(batch,))
        return {k: self.strategy.gather(v, axis=0) for k, v in outputs.items()}

    @tf.function(autograph=False)
    def _single_predict_step(self, batch):
        return self.task.predict_step(self.model, batch)

    @tf.function(reduce_retracing=True, autograph=False)
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

    def write_summary(self, kind: str, values: dict, step: int) -> None:
        if not self.is_chief:
            return
        if kind not in self._writers:
            self._writers[kind] = tf.summary.create_file_writer(
                os.path.join(self.config.output_dir, kind))
        with self._writers[kind].as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        self._writers[kind].flush()

    def write_weights(self, folder: str) -> None:
        """The model's weights alone (for `best/`), as a TensorFlow checkpoint `folder/model`."""
        tf.train.Checkpoint(model=self.model).write(os.path.join(folder, "model"))

    def current_learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    # ------------------------------------------------------------------------- the loop's hooks
    def latest_checkpoint(self) -> str | None:
        return tf.train.latest_checkpoint(self.work_dir)

    def _checkpoint_folder(self) -> str:
        # Every worker takes part in saving (a collective operation), each into its own folder.
        return self.work_dir

    def _open(self, dataset_fn: Callable) -> None:
        # One replica: the input iterator's position is part of the checkpoint, so it is made
        # before the restore; several: the seeded pipeline is rebuilt and skipped instead.
        self._single = (self.strategy.num_replicas_in_sync == 1) and self.config.checkpoint_iterator
        self._iterator = iter(self._input(dataset_fn)) if self._single else None
        self._saved, self._manager = self._checkpoint(self._iterator)

    def _restore_for_training(self) -> str | None:
        latest = self._manager.latest_checkpoint
        if latest:
            self._saved.restore(latest).assert_existing_objects_matched()
        return latest

    def _training_input(self, dataset_fn: Callable, elements: int):
        if self._single:
            return self._iterator
        return iter(self._input(dataset_fn, skip_updates=elements))

    def _run_steps(self, batches, count: int) -> dict:
        return self._train_loop(batches, tf.constant(count))

    def _request_stop(self, stop: bool) -> None:
        self._stop.assign(stop)

    def _set_micro_batches(self, count: int) -> None:
        self._micro_batches.assign(count)

    def _save(self, step: int) -> Callable[[], str]:
        # Written here, in the training thread: tf.train.Checkpoint reads the variables as it
        # writes them (and on several workers saving is a collective operation).
        fault_points.reached("checkpoint_write", self.work_dir)
        try:
            path = self._manager.save(checkpoint_number=step)
        except BaseException:  # a full disk, say: leave no partial checkpoint behind
            remove_partial_checkpoints(self.work_dir)
            raise
        return lambda: path

    def _evaluation_step(self) -> Callable:
        return self._eval_step

    def _evaluation_input(self, dataset_fn: Callable):
        return self._input(dataset_fn)

    # ------------------------------------------------------------------------- public
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
        for up to a minute (issue 29; `data_gen.datasets.without_autotune_model`). On one replica
        the model is off whatever `dataset_fn` gives: an iterator of a caller's own pipeline,
        deleted when Python's garbage collector reaches it, held the caller for up to a minute
        (tests/test_training_loop.py's trainers: 16-47 s of a 6 s test in `make test`)."""
        if self.strategy.num_replicas_in_sync == 1:
            dataset = without_autotune_model(dataset_fn(tf.distribute.InputContext()))
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
