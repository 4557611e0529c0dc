"""Multiple-choice scores from the choice logits: accuracy and the training loss, in NumPy."""
from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the choices (masked choices carry a logit of -10000: probability 0)."""
    return np.exp(log_softmax(logits))


def choice_metrics(logits: np.ndarray, labels: np.ndarray) -> dict:
    """`accuracy` (the highest-scoring choice is the labelled one) and `loss` (mean
    cross-entropy over the choices, as in training)."""
    labels = np.asarray(labels)
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == labels))
    loss = float(np.mean(-log_softmax(logits)[np.arange(len(labels)), labels]))
    return {"accuracy": accuracy, "loss": loss}
