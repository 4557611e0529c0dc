"""Multiple-choice scores from the choice logits: accuracy and the training loss, in NumPy."""
from __future__ import annotations

import numpy as np

from bert_tf2.tasks.prediction_files import log_softmax


def choice_metrics(logits: np.ndarray, labels: np.ndarray) -> dict:
    """`accuracy` (the highest-scoring choice is the labelled one) and `loss` (mean
    cross-entropy over the choices, as in training)."""
    labels = np.asarray(labels)
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == labels))
    loss = float(np.mean(-log_softmax(logits)[np.arange(len(labels)), labels]))
    return {"accuracy": accuracy, "loss": loss}
