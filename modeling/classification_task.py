"""The sentence (pair) classification task: loss for the shared loop, predictions for GLUE scoring.

Batches are the classifier records' features (`data_gen.classifier_features`). The loss is the
original's: mean cross-entropy of the labels, or, for a regression task (one output, STS-B), the
mean squared error. `predict` gives the logits (or scores) with each example's index, and
`probabilities` / `predicted_labels` turn them into what `test_results.tsv` and GLUE metrics need.
"""
from __future__ import annotations

import numpy as np
from keras import ops

from modeling import losses
from modeling.task_io import model_inputs


class ClassificationTask:
    def __init__(self, regression: bool = False):
        self.regression = regression

    def loss_and_metrics(self, model, batch, training: bool):
        logits = model(model_inputs(batch), training=training)["logits"]
        examples = ops.cast(ops.shape(logits)[0], "float32")
        if self.regression:
            loss = losses.regression_loss(logits, batch["label_ids"])
            return loss, {"mean_squared_error": (loss * examples, examples)}
        labels = ops.cast(batch["label_ids"], "int32")
        loss = losses.classification_loss(logits, labels)
        hits = ops.cast(ops.equal(ops.argmax(logits, -1), labels), "float32")
        return loss, {"accuracy": (ops.sum(hits), examples)}

    def predict_step(self, model, batch) -> dict:
        logits = ops.cast(model(model_inputs(batch), training=False)["logits"], "float32")
        return {"logits": logits, "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ NumPy, after predict
    def predictions(self, logits: np.ndarray) -> np.ndarray:
        """Label ids (classification) or scores (regression) from the model's logits."""
        return logits[:, 0] if self.regression else np.argmax(logits, axis=-1)

    def loss(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """The training loss over a whole split, from collected logits (float64)."""
        logits = logits.astype(np.float64)
        if self.regression:
            return float(np.mean((logits[:, 0] - labels) ** 2))
        return float(np.mean(-log_softmax(logits)[np.arange(len(labels)), labels]))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def probabilities(logits: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(logits.astype(np.float64)))
