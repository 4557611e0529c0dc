"""The weights that scored best on the task's main metric, kept in `output_dir/best/`.

Fine-tuning evaluates at every epoch's end; `BestCheckpoint` keeps the model weights (not the
optimiser's state) of the best evaluation with its `eval_results.txt`, written beside the old copy
and swapped in, so that a crash leaves one complete copy. A resumed run reads the best score so
far from it. Prediction and export use these weights by default (`--use_best_checkpoint`).
On TensorFlow the weights are a `tf.train.Checkpoint` (`best/model.*`); on JAX a safetensors file of
the model's variables (`best/weights.safetensors`, `modeling.variable_files`), which TensorFlow
reads too: a run trained on JAX is exported by the same command on TensorFlow.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from bert_tf2.engine.results import (
    RESULTS_FILE,
    lower_is_better,
    read_eval_results,
    write_eval_results,
)
from bert_tf2.process.atomic_files import recover_directory, staged_directory

logger = logging.getLogger(__name__)

BEST_DIR = "best"
KERAS_WEIGHTS = "weights.safetensors"  # what the JAX trainer's `write_weights` writes


def _weights_file(folder: str) -> str | None:
    """The weights in `folder`: a JAX run's (any backend reads them), else TensorFlow's."""
    for name in (KERAS_WEIGHTS, "model.index"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


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

    def offer(self, write_weights: Callable[[str], None], results: dict) -> bool:
        """Keep the weights (`write_weights(folder)`: the trainer's) if `results[metric]` beats
        the best so far."""
        if self.metric not in results:
            raise KeyError(f"the best-checkpoint metric {self.metric!r} is not among the "
                           f"evaluation results: {', '.join(sorted(results))}")
        score = results[self.metric]
        if self.score is not None and not (score < self.score if self.lower_is_better
                                           else score > self.score):
            return False
        with staged_directory(self.directory, fault_point="best_swap") as staging:
            write_weights(staging)
            write_eval_results(os.path.join(staging, RESULTS_FILE), results)
        logger.info("new best %s = %.4f at step %d (was %s): saved in %s", self.metric, score,
                    int(results.get("global_step", -1)),
                    "none" if self.score is None else f"{self.score:.4f}", self.directory)
        self.results = dict(results)
        return True

    def exists(self) -> bool:
        return _weights_file(self.directory) is not None

    def restore(self, model) -> bool:
        if not self.exists():
            return False
        self.results = read_eval_results(os.path.join(self.directory, RESULTS_FILE))
        path = _weights_file(self.directory)
        if path.endswith(KERAS_WEIGHTS):
            from bert_tf2.modeling import variable_files

            variable_files.load(path, {"model": model.weights})
        else:
            import tensorflow as tf

            tf.train.Checkpoint(model=model).read(os.path.join(self.directory, "model")) \
                .assert_existing_objects_matched()
        logger.info("restored the best weights (%s = %s at step %d) from %s", self.metric,
                    self.score, int(self.results.get("global_step", -1)), self.directory)
        return True
