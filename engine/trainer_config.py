"""What every trainer shares, whatever Keras's backend: its settings, its checkpoints' names, when its
loops end, which process writes, and its errors.

`engine.training.Trainer` (TensorFlow: tf.data, tf.distribute, tf.train.Checkpoint) and
`engine.keras_training.KerasTrainer` (JAX: NumPy batches, `keras.distribution`, checkpoints in
safetensors) both take a `TrainerConfig` and end loops at the same steps, so that the fine-tuning
and pretraining drivers run either the same way (docs/backends.md).
"""
from __future__ import annotations

import dataclasses
import math
import os

from bert_tf2.process.errors import UserError

# Training checkpoints are `model.ckpt-N.*`, the original's names, so that the paths users pass
# (`--init_checkpoint=$OUTPUT_DIR/model.ckpt-N`) resolve. Runs of earlier versions wrote `ckpt-N`;
# they still resume (the `checkpoint` file names them).
CHECKPOINT_NAME = "model.ckpt"
CHECKPOINT_PREFIXES = (CHECKPOINT_NAME + "-", "ckpt-")


def is_training_checkpoint(file_name: str) -> bool:
    """Whether a file in an output folder belongs to a training checkpoint."""
    return file_name.startswith(CHECKPOINT_PREFIXES)


def remove_partial_checkpoints(directory: str) -> list[str]:
    """Delete the `*_temp` folders a checkpoint write leaves when the process is killed in it
    (TensorFlow writes the shards there, then moves them); returns what was removed."""
    import shutil

    removed = []
    if not os.path.isdir(directory):
        return removed
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if is_training_checkpoint(name) and name.endswith("_temp") and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class EmptyInputError(ValueError):
    """An evaluation or prediction dataset yielded no batch."""


class NonFiniteLossError(UserError):
    """The loss became NaN or infinite; the run stopped without saving (a one-line error: the
    learning rate or the data is the usual cause)."""


@dataclasses.dataclass
class TrainerConfig:
    """What a trainer runs by. Its defaults are the engine's, and `engine.build.RunSettings`
    (whence the runners' flags) takes them from here: written once (`tests/test_defaults.py`)."""
    output_dir: str
    num_train_steps: int
    steps_per_loop: int = 100
    save_checkpoints_steps: int = 1000
    # One checkpoint for resuming: a fine-tuning run keeps its best weights in best/, and a
    # checkpoint with the optimizer's moments is 3x the model (4 GB for BERT-Large).
    # run_pretraining keeps 5, the original's (tf.estimator's) default (PretrainSettings).
    keep_checkpoint_max: int = 1
    num_accumulation_steps: int = 1
    jit_compile: bool = False
    # XLA-compile the optimizer's update alone (one fused pass over each variable's weights,
    # moments and gradient; 2.3x faster on a CPU); one device only (several replicas merge).
    # None: where it pays for its compile (`engine.training.update_pays_for_its_compile`).
    compile_optimizer: bool | None = None
    examples_per_step: int = 0  # global batch of one update, for examples/s; 0 = unknown
    # Loops also end at the steps round(k * callback_every_steps), k = 1, 2, ..., so that
    # `on_loop_end` can act there (evaluate at each epoch's end: examples / batch, a fraction).
    callback_every_steps: float = 0
    save_at_callbacks: bool = False  # also checkpoint there (short fine-tuning runs)
    # Save the input iterator's state in checkpoints (one replica). False: on resume, rebuild the
    # (seeded, deterministic) pipeline and skip the batches already used, as several replicas do.
    checkpoint_iterator: bool = True
    # A run on a time budget (`engine.time_budget.TimeBudget`): the learning rate follows the
    # share of it spent, and training ends when it is spent (or at num_train_steps).
    time_budget: object = None


def ratios(metrics: dict) -> dict:
    """{name: sum / count} of summed (sum, count) metrics (NaN where nothing was counted)."""
    return {name: (float(s) / float(c) if float(c) else float("nan"))
            for name, (s, c) in metrics.items()}


def next_boundary(step: int, every: float) -> float:
    """The first step after `step` of the form round(k * every), k >= 1 (inf if every <= 0)."""
    if every <= 0:
        return math.inf
    k = math.floor(step / every) + 1
    while round(k * every) <= step:
        k += 1
    return round(k * every)


def is_boundary(step: int, every: float) -> bool:
    """Whether `step` is round(k * every) for some k >= 1."""
    return every > 0 and next_boundary(step - 1, every) == step


def worker_dir(strategy, output_dir: str) -> str:
    """`output_dir` for the chief; a scratch folder inside it for the other workers, which take
    part in collective saves but whose copies nobody reads."""
    if is_chief(strategy):
        return output_dir
    worker = getattr(strategy, "process_index", None)  # a Keras (JAX) strategy's process
    if worker is None:
        worker = strategy.cluster_resolver.task_id
    return os.path.join(output_dir, f"worker_{worker}_scratch")


def is_chief(strategy) -> bool:
    """Whether this process writes the outputs: always, but for the non-chief workers of a
    multi-worker strategy (the chief is task `chief`, or `worker` 0 when there is none; on JAX,
    process 0)."""
    if getattr(strategy, "process_index", None) is not None:
        return strategy.process_index == 0
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "chief" or (not has_chief and resolver.task_type == "worker"
                                              and resolver.task_id == 0)

