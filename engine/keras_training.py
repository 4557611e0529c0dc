"""The JAX backend of the training loop (`engine.training_loop.TrainingLoop`): no TensorFlow.

The loop itself (resume, loop boundaries, the NaN stop, logging, summaries, checkpoint cadence,
exact evaluation sums) is `TrainingLoop`'s, shared with the TensorFlow trainer; the drivers call
both alike (`build_trainer` picks by Keras's backend). What this backend supplies:
- batches are NumPy (`data_gen.numpy_datasets`, made by worker threads), laid out on the devices
  ahead of the step by `engine.input_feed.DeviceFeed` through the strategy
  (`engine.distribution.KerasStrategy`: one device, or data parallel over `keras.distribution`,
  where XLA adds the cross-device sums), which also counts the step's wait for input;
- one update is one `jax.jit` function of the variables' values: the task's
  `loss_and_metrics` under `keras.StatelessScope` (dropout's generators advance in it), gradients
  by `jax.value_and_grad`, micro-batches averaged (`num_accumulation_steps`; with a batch-size
  ramp, a jitted step per micro-batch and one for the update, so no count compiles again), the
  original's clip
  to global norm 1 (counting an embedding lookup's gradient per looked-up row, as TensorFlow's
  IndexedSlices do: `modeling.layers.lookup_gradient_tap`), then the optimiser's
  `stateless_apply` (AdamWeightDecay or LAMB, and under mixed_float16 Keras's loss scaling); the
  metric sums stay on the device until the loop's end (one wait per `steps_per_loop`);
- checkpoints are `model.ckpt-N.safetensors` (`modeling.variable_files`: the model, the
  optimiser with its step, and dropout's generators): copied to the host between two loops, then
  written in the background (`engine.checkpoint_writer`) through a `model.ckpt-N_temp/` folder
  and renamed, the newest `keep_checkpoint_max` kept; with several processes each writes its
  share of the file (`variable_files.Layout`). A run resumes from the newest one and
  rebuilds the seeded pipeline, skipping the batches already used, so it goes on exactly as an
  uninterrupted run (tests/test_backends.py kills runs with SIGKILL to hold it to that).
TensorBoard's `train/` and `eval/` events are written by TensorBoard's own writer.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Callable

import numpy as np

from bert_tf2.data_gen.batching import XLA_LENGTH_MULTIPLE
from bert_tf2.engine.best_checkpoint import KERAS_WEIGHTS
from bert_tf2.engine.event_files import EventFile
from bert_tf2.engine.input_feed import DeviceFeed
from bert_tf2.engine.trainer_config import (
    CHECKPOINT_NAME,
    TrainerConfig,
    ratios,
)
from bert_tf2.engine.training_loop import TrainingLoop
from bert_tf2.modeling import variable_files
from bert_tf2.process import fault_points
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)

SHARE_TIMEOUT_S = 600  # how long process 0 waits for the other processes' shares of a checkpoint


def checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"{CHECKPOINT_NAME}-{step}{variable_files.SUFFIX}")


def checkpoints_in(directory: str) -> list:
    """(step, path) of every complete runner checkpoint in `directory`, oldest first."""
    found = []
    prefix = CHECKPOINT_NAME + "-"
    if not os.path.isdir(directory):
        return found
    for name in os.listdir(directory):
        if name.startswith(prefix) and name.endswith(variable_files.SUFFIX):
            number = name[len(prefix):-len(variable_files.SUFFIX)]
            if number.isdigit():
                found.append((int(number), os.path.join(directory, name)))
    return sorted(found)


def latest_checkpoint(directory: str) -> str | None:
    found = checkpoints_in(directory)
    return found[-1][1] if found else None


def _metric_sums(loss, metrics: dict) -> dict:
    """The task's loss and (sum, count) metrics as float32 [sum, count] pairs (`engine.training`'s
    rule: the loss counts one per batch)."""
    import jax.numpy as jnp

    metrics = {"loss": (loss, 1.0), **metrics}
    return {k: jnp.stack([jnp.asarray(s, jnp.float32), jnp.asarray(c, jnp.float32)])
            for k, (s, c) in metrics.items()}


def _lookup_tap():
    """An identity on looked-up rows whose backward pass adds their squared gradient norm to the
    cotangent of a scalar probe (see `modeling.layers.lookup_gradient_tap`)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def tap(rows, probe):
        return rows

    def forward(rows, probe):
        return rows, None

    def backward(_, gradient):
        return gradient, jnp.sum(jnp.square(gradient.astype(jnp.float32)))

    tap.defvjp(forward, backward)
    return tap


class KerasTrainer(TrainingLoop):
    """Trains `model` with `optimizer` on `task` on JAX (see the module docstring)."""

    def __init__(self, model, optimizer, task, strategy, config: TrainerConfig):
        import keras

        if keras.backend.backend() != "jax":
            raise SettingsError(f"training runs on the tensorflow and jax backends, not "
                                f"{keras.backend.backend()} (KERAS_BACKEND); "
                                f"docs/backends.md says what runs where")
        super().__init__(model, optimizer, task, strategy, config)
        # The training checkpoints: the chief writes them, every process reads them on resume
        # (several machines share --output_dir; their scratch folders hold the rest).
        self.checkpoint_dir = config.output_dir
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        self._trainable = list(model.trainable_variables)
        self._frozen = list(model.non_trainable_variables)
        self._optimizer_variables = list(optimizer.variables)
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        self._clip_norm = getattr(inner, "clip_norm", None)
        self._scale_index = None  # mixed_float16: where the loss scale is among the optimizer's
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            self._scale_index = next(i for i, v in enumerate(self._optimizer_variables)
                                     if v is optimizer.dynamic_scale)
        self._tap = _lookup_tap()
        self._steps = {}  # jitted functions, made on first use
        self._stop = False
        self._micro_batches = 1  # with a batch-size ramp: the loop sets it
        # The step counted on the host while a loop runs: its steps donate the variables'
        # buffers (`iterations` among them) until the loop assigns the new state back, and a
        # Ctrl-C or SIGTERM in between must still be able to say which step the run was at.
        self._host_step = None

    # ------------------------------------------------------------------------- state
    def _state(self) -> tuple:
        return self.strategy.commit(([v.value for v in self._trainable],
                                     [v.value for v in self._frozen],
                                     [v.value for v in self._optimizer_variables]))

    def _assign(self, state: tuple) -> None:
        for variables, values in zip((self._trainable, self._frozen, self._optimizer_variables),
                                     state):
            for variable, value in zip(variables, values):
                variable.assign(value)

    def _groups(self, with_optimizer: bool = True) -> dict:
        weights = {id(v) for v in self.model.weights}
        groups = {"model": self.model.weights,
                  "random": [v for v in self.model.non_trainable_variables
                             if id(v) not in weights]}
        if with_optimizer:
            groups["optimizer"] = self._optimizer_variables
        return groups

    # ------------------------------------------------------------------------- the step
    def _call(self, trainable, frozen, batch, fn, tap=None):
        """`fn(model, batch)` with the variables' values given; returns its result and the new
        values of the non-trainable variables (dropout's generators)."""
        import keras

        from bert_tf2.modeling.layers import lookup_gradient_tap

        mapping = list(zip(self._trainable, trainable)) + list(zip(self._frozen, frozen))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            if tap is not None:
                with lookup_gradient_tap(tap):
                    result = fn(self.model, batch)
            else:
                result = fn(self.model, batch)
            new_frozen = [scope.get_current_value(v) for v in self._frozen]
        new_frozen = [old if new is None else new for old, new in zip(frozen, new_frozen)]
        return result, new_frozen

    def _train_step(self, state, batch):
        """One update: the clipped gradients of `batch`, applied by the optimiser."""
        trainable, _, optimizer_values = state
        grads, frozen, sums = self._clipped_gradients(state, batch)
        trainable, optimizer_values = self.optimizer.stateless_apply(optimizer_values, grads,
                                                                     trainable)
        return (trainable, frozen, optimizer_values), sums

    def _scale(self, optimizer_values):
        """The loss scale under mixed_float16 (None otherwise)."""
        return (optimizer_values[self._scale_index] if self._scale_index is not None
                else None)

    def _loss_gradients(self, trainable, frozen, scale, batch, tapped: set | None = None):
        """The gradients of the (scaled) task loss on one (micro-)batch, the squared norm of its
        tapped lookups' gradients, the new non-trainable values and the metric sums. `tapped`:
        a set that collects the paths of the tables whose lookups were tapped (known once
        traced); None: no tap (accumulated gradients are dense in TensorFlow too)."""
        import jax
        import jax.numpy as jnp

        def loss_of(values, probe, frozen, micro):
            def tap(rows, table):
                tapped.add(table.path)
                return self._tap(rows, probe)

            (loss, metrics), new_frozen = self._call(
                values, frozen, micro,
                lambda model, b: self.task.loss_and_metrics(model, b, training=True),
                tap if tapped is not None else None)
            scaled = loss if scale is None else loss * scale.astype(loss.dtype)
            return scaled, (loss, metrics, new_frozen)

        gradient_of = jax.value_and_grad(loss_of, argnums=(0, 1), has_aux=True)
        (_, (loss, metrics, frozen)), (grads, lookup_square) = gradient_of(
            trainable, jnp.float32(0.0), frozen, batch)
        return grads, lookup_square, frozen, _metric_sums(loss, metrics)

    def _clipped_gradients(self, state, batch):
        """The gradients of one update (micro-batches averaged), clipped as the original clips
        them; the new values of the non-trainable variables; the metric sums."""
        import jax
        import jax.numpy as jnp

        trainable, frozen, optimizer_values = state
        k = self.config.num_accumulation_steps
        scale = self._scale(optimizer_values)
        tapped = set()
        if k == 1:
            grads, lookup_square, frozen, sums = self._loss_gradients(trainable, frozen, scale,
                                                                      batch, tapped)
        else:
            micro = jax.tree_util.tree_map(
                lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)
            grads, sums, lookup_square = None, None, jnp.float32(0.0)
            for i in range(k):
                g, _, frozen, m = self._loss_gradients(
                    trainable, frozen, scale, jax.tree_util.tree_map(lambda x: x[i], micro))
                grads = g if grads is None else [a + b for a, b in zip(grads, g)]
                sums = m if sums is None else {n: sums[n] + m[n] for n in sums}
            grads = [g / k for g in grads]
        return self._clip(grads, lookup_square, tapped, scale), frozen, sums

    def _clip(self, grads, lookup_square, tapped: set, scale):
        """`grads` clipped to the original's global norm (the tapped tables' rows counted as
        `lookup_square`)."""
        import jax.numpy as jnp

        if self._clip_norm:
            square = lookup_square
            for variable, g in zip(self._trainable, grads):
                if variable.path not in tapped:
                    square = square + jnp.sum(jnp.square(g.astype(jnp.float32)))
            norm = jnp.sqrt(square)
            if scale is not None:  # clipped as TensorFlow clips: after the loss scale is undone
                norm = norm / scale
            factor = self._clip_norm / jnp.maximum(norm, self._clip_norm)
            grads = [g * factor.astype(g.dtype) for g in grads]
        return grads

    def _micro_step(self, trainable, frozen, scale, batch):
        """A batch-size ramp's micro-batch: the new non-trainable values, its gradients (dense)
        and metric sums."""
        grads, _, frozen, sums = self._loss_gradients(trainable, frozen, scale, batch)
        return frozen, (grads, sums)

    @staticmethod
    def _add(total, more):
        import jax

        return jax.tree_util.tree_map(lambda a, b: a + b, total, more)

    def _ramped_update(self, state, grads, count):
        """A batch-size ramp's update: the summed gradients of `count` micro-batches averaged,
        clipped and applied."""
        import jax.numpy as jnp

        trainable, frozen, optimizer_values = state
        grads = [g / count.astype(g.dtype) for g in grads]
        grads = self._clip(grads, jnp.float32(0.0), set(), self._scale(optimizer_values))
        trainable, optimizer_values = self.optimizer.stateless_apply(optimizer_values, grads,
                                                                     trainable)
        return trainable, frozen, optimizer_values

    def _jitted(self, name: str, fn: Callable, **options):
        if name not in self._steps:
            import jax

            self._steps[name] = jax.jit(fn, **options)
        return self._steps[name]

    def gradients(self, batch) -> tuple:
        """The clipped gradients and metrics of one update on `batch`, without applying them
        (for comparing backends). Jitted, as the step is: run op by op, JAX compiled each op
        alone (393 of them for MiniLM under mixed_float16: 15 s of a 28 s run)."""
        clipped = self._jitted("gradients", self._clipped_gradients)
        grads, _, sums = clipped(self._state(), self.strategy.put(batch))
        return [np.asarray(g) for g in grads], ratios({k: np.asarray(v) for k, v in sums.items()})

    # ------------------------------------------------------------------------- bookkeeping
    @property
    def global_step(self) -> int:
        if self._host_step is not None:  # inside `_run_steps`: the buffers are donated
            return self._host_step
        return int(np.asarray(self.optimizer.iterations.value))

    def current_learning_rate(self) -> float:
        import keras

        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    def write_summary(self, kind: str, values: dict, step: int) -> None:
        if not self.is_chief:
            return
        if kind not in self._writers:
            self._writers[kind] = EventFile(os.path.join(self.config.output_dir, kind))
        self._writers[kind].write(values, step)

    def write_weights(self, folder: str) -> None:
        """The model's weights alone (for `best/`), as `folder/weights.safetensors`."""
        os.makedirs(folder, exist_ok=True)
        variable_files.save(os.path.join(folder, KERAS_WEIGHTS), {"model": self.model.weights}, 0)

    def _restore(self, path: str) -> None:
        variable_files.load(path, self._groups())

    # ------------------------------------------------------------------------- the loop's hooks
    def latest_checkpoint(self) -> str | None:
        return latest_checkpoint(self.checkpoint_dir)

    def _checkpoint_folder(self) -> str | None:
        # The chief writes the checkpoints; every process reads them on resume.
        return self.checkpoint_dir if self.is_chief else None

    def _restore_for_training(self) -> str | None:
        return self.restore_latest()  # the whole state, as for any other use

    def _training_input(self, dataset_fn: Callable, elements: int) -> DeviceFeed:
        batches = dataset_fn(self.strategy.input_context())
        return DeviceFeed(iter(batches.skip(elements) if elements else batches),
                          self.strategy.put)

    def _close_input(self, batches: DeviceFeed) -> None:
        batches.close()

    def _input_waited(self, batches: DeviceFeed) -> float:
        return batches.waited

    def _run_steps(self, batches: DeviceFeed, count: int) -> dict:
        if self.ramp:
            micro_step = self._jitted("micro", self._micro_step)
            add = self._jitted("add", self._add, donate_argnums=0)
            # The state only: no output can reuse the summed gradients' buffers (donated, JAX
            # warned of each on stderr)
            update = self._jitted("ramped", self._ramped_update, donate_argnums=0)
            k = self._micro_batches

            def train_step(state, batch):
                trainable, frozen, optimizer_values = state
                scale = self._scale(optimizer_values)
                frozen, total = micro_step(trainable, frozen, scale, batch)
                for _ in range(k - 1):
                    frozen, more = micro_step(trainable, frozen, scale, next(batches))
                    total = add(total, more)
                grads, sums = total
                return update((trainable, frozen, optimizer_values), grads, np.float32(k)), sums
        else:
            train_step = self._jitted("train", self._train_step, donate_argnums=0)
        # Read before the first step donates it; left set if an interrupt unwinds the loop, for
        # its message. Under mixed_float16 a step skipped for overflowing gradients counts here,
        # though `iterations` does not move: the message may then name a later step.
        self._host_step = self.global_step
        state, totals = self._state(), None
        for i in range(count):
            if i and self._stop:
                break
            state, sums = train_step(state, next(batches))
            self._host_step += 1
            fault_points.reached("train_step")
            totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
        totals = {k: np.asarray(v) for k, v in totals.items()}  # the loop's one wait on the device
        self._assign(state)
        self._host_step = None
        return totals

    def _request_stop(self, stop: bool) -> None:
        self._stop = stop

    def _set_micro_batches(self, count: int) -> None:
        self._micro_batches = count

    def _save(self, step: int) -> Callable[[], str]:
        """The state of `step` copied to the host now; the returned function writes it through a
        `_temp` folder (a kill leaves no partial file) in the checkpoint writer's thread. With
        several processes each copies and writes only its share of the one file."""
        path = checkpoint_path(self.checkpoint_dir, step)
        staging = os.path.join(self.checkpoint_dir, f"{CHECKPOINT_NAME}-{step}_temp")
        staged = os.path.join(staging, "state" + variable_files.SUFFIX)
        if self.strategy.num_processes > 1:
            return self._save_shares(step, path, staging, staged)
        arrays = variable_files.host_arrays(self._groups())

        def write() -> str:
            os.makedirs(staging, exist_ok=True)
            fault_points.reached("checkpoint_write", self.checkpoint_dir)
            try:
                variable_files.write(staged, arrays, step)
            except BaseException:  # a full disk, say: no partial file left
                shutil.rmtree(staging, ignore_errors=True)
                raise
            return self._publish(staged, path, staging)

        return write

    def _save_shares(self, step: int, path: str, staging: str, staged: str) -> Callable[[], str]:
        """Several processes (data parallel: each holds every weight): process 0 makes the file
        at its full size, then each process copies and writes only its share of the arrays
        (`variable_files.Layout`, balanced by bytes) and says so with a `share-N.done` file;
        process 0 renames the file into place once every share is in."""
        from jax.experimental import multihost_utils

        processes, me = self.strategy.num_processes, self.strategy.process_index
        layout = variable_files.Layout(self._groups(), step, processes)
        arrays = layout.host_share(me)
        if self.is_chief:
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
            layout.create(staged)
        multihost_utils.sync_global_devices(f"checkpoint {step}")  # the file is there for all

        def write() -> str:
            if self.is_chief:
                fault_points.reached("checkpoint_write", self.checkpoint_dir)
            layout.write_share(staged, arrays)
            open(os.path.join(staging, f"share-{me}.done"), "w").close()
            logger.info("process %d wrote its share of %s: %d of %d arrays, %.1f MB", me, path,
                        len(arrays), len(layout.variables),
                        sum(a.nbytes for a in arrays.values()) / 1e6)
            if not self.is_chief:
                return path
            waiting = [os.path.join(staging, f"share-{p}.done") for p in range(processes)]
            deadline = time.time() + SHARE_TIMEOUT_S
            while not all(os.path.exists(done) for done in waiting):
                if time.time() > deadline:
                    missing = [p for p, done in enumerate(waiting) if not os.path.exists(done)]
                    raise RuntimeError(f"{path}: process(es) {missing} did not write their "
                                       f"share within {SHARE_TIMEOUT_S} s")
                time.sleep(0.01)
            return self._publish(staged, path, staging)

        return write

    def _publish(self, staged: str, path: str, staging: str) -> str:
        """The complete file renamed into place, its staging folder removed, the checkpoints
        beyond `keep_checkpoint_max` deleted; returns `path`."""
        os.replace(staged, path)
        shutil.rmtree(staging, ignore_errors=True)
        for _, old in checkpoints_in(self.checkpoint_dir)[:-self.config.keep_checkpoint_max]:
            os.remove(old)
        return path

    def _eval_step(self, trainable, frozen, batch):
        (loss, metrics), _ = self._call(
            trainable, frozen, batch,
            lambda model, b: self.task.loss_and_metrics(model, b, training=False))
        return _metric_sums(loss, metrics)

    def _evaluation_step(self) -> Callable:
        step = self._jitted("eval", self._eval_step)
        trainable, frozen, _ = self._state()
        return lambda batch: step(trainable, frozen, self.strategy.put(batch))

    def _evaluation_input(self, dataset_fn: Callable):
        return dataset_fn(self.strategy.input_context())

    def _predict_step(self, trainable, frozen, batch):
        outputs, _ = self._call(trainable, frozen, batch,
                                lambda model, b: self.task.predict_step(model, b))
        return outputs

    def predict(self, dataset_fn: Callable) -> dict:
        """The task's `predict_step` outputs over a finite dataset, as NumPy arrays in order.
        Every batch is padded to the first batch's rows (a multiple of the devices), so that
        the step compiles once per width, and the padding rows are dropped again."""
        step = self._jitted("predict", self._predict_step)
        trainable, frozen, _ = self._state()
        chunks, rows = [], None
        processes = self.strategy.num_processes
        for batch in dataset_fn(self.strategy.input_context()):
            count = len(next(iter(batch.values())))
            if rows is None:
                devices = self.strategy.num_replicas_in_sync // processes
                rows = -(-count // devices) * devices
            if processes > 1 and count != rows:  # every process must give the same rows
                raise ValueError(f"a prediction batch of {count} rows, not {rows}: several "
                                 f"processes read equal, full batches")
            padded = {name: np.concatenate([value, np.repeat(value[:1], rows - count, axis=0)])
                      if count < rows else value for name, value in batch.items()}
            outputs = step(trainable, frozen, self.strategy.put(padded))
            # Several processes: every process's rows, gathered (each pipeline's padding rows
            # carry example_index -1 and are dropped by the caller).
            chunks.append({k: _host_rows(v) if processes > 1 else np.asarray(v)[:count]
                           for k, v in outputs.items()})
        if not chunks:
            raise ValueError("prediction dataset is empty")
        return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}

    def restore_latest(self) -> str | None:
        """Restore model and optimiser from the newest checkpoint in output_dir."""
        latest = self.latest_checkpoint()
        if latest:
            self._restore(latest)
        return latest


def _host_rows(value) -> np.ndarray:
    """Every process's rows of a batch-sharded output, on every process."""
    if getattr(value, "is_fully_addressable", True) is False:
        from jax.experimental import multihost_utils

        value = multihost_utils.process_allgather(value, tiled=True)
    return np.asarray(value)


def compiled_predictor(model, batch_size: int, max_width: int,
                       width_multiple: int = XLA_LENGTH_MULTIPLE) -> Callable:
    """`model(inputs, training=False)` as a jitted function of NumPy `[batch, length]` inputs
    (JAX): each batch is padded to `batch_size` rows and its width to a multiple of
    `width_multiple` (at most `max_width`; masked positions: the real ones' outputs stay), so that it
    compiles once per width; the outputs come back as NumPy, cut to the batch's rows and width."""
    import jax

    step = jax.jit(lambda trainable, frozen, inputs: model.stateless_call(
        trainable, frozen, inputs, training=False)[0])

    def predict(batch: dict) -> dict:
        rows, width = next(iter(batch.values())).shape
        padded_width = max(width, min(-(-width // width_multiple) * width_multiple, max_width))
        padded = {name: np.pad(np.asarray(value), ((0, max(batch_size, rows) - rows),
                                                   (0, padded_width - width)))
                  for name, value in batch.items()}
        outputs = step([v.value for v in model.trainable_variables],
                       [v.value for v in model.non_trainable_variables], padded)
        result = {}
        for name, value in outputs.items():
            value = np.asarray(value)[:rows]
            if value.ndim >= 2 and value.shape[1] == padded_width:  # a position axis
                value = value[:, :width]
            result[name] = value
        return result

    return predict
