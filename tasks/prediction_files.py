"""Prediction files of the tasks that score a fixed set of answers (classes, choices).

Two files per prediction split:
- `test_results.tsv`, the original run_classifier's layout, which users' scripts read (for instance
  with `numpy.loadtxt`): one line per example in input order, its probabilities tab-separated as the
  original prints float32 values, no header; for a regression task one score per line;
- `test_predictions.tsv` (and `eval_predictions.tsv` for the evaluation split), ours: a header, then
  the example's id, the predicted label and the probabilities.

The softmax is computed once here in float64, from the collected logits.
"""
from __future__ import annotations

import numpy as np

from bert_tf2.process.atomic_files import write_text


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (a masked choice's logit of -10000 gives probability 0)."""
    return np.exp(log_softmax(logits))


def float32_text(value) -> str:
    """A value as the original printed its float32 outputs (`str` of a NumPy float32)."""
    return str(np.float32(value))


def write_test_results(path: str, rows: np.ndarray) -> None:
    """The original's `test_results.tsv`: one line of tab-separated values per row, no header."""
    rows = np.asarray(rows).reshape(len(rows), -1)
    write_text(path, "".join("\t".join(float32_text(v) for v in row) + "\n" for row in rows))


def write_prediction_table(path: str, ids: list, predicted: list, columns: list,
                           values: np.ndarray) -> None:
    """Ours: a header (`id`, `prediction`, `columns`), then one row per example, values with six
    decimals."""
    if not (len(ids) == len(predicted) == len(values)):
        raise RuntimeError(f"{len(ids)} examples but {len(values)} predictions")
    values = np.asarray(values).reshape(len(values), -1)
    lines = ["\t".join(["id", "prediction", *columns])]
    lines += ["\t".join([str(i), str(p), *(f"{v:.6f}" for v in row)])
              for i, p, row in zip(ids, predicted, values)]
    write_text(path, "\n".join(lines) + "\n")


def write_label_table(path: str, labels: list, columns: dict) -> None:
    """One row per label: a header (`label` and the column names), then the label's values
    (integers as they are, other numbers with six decimals)."""
    names = list(columns)
    lines = ["\t".join(["label", *names])]
    for i, label in enumerate(labels):
        cells = [str(columns[name][i]) if np.issubdtype(np.asarray(columns[name]).dtype,
                                                         np.integer)
                 else f"{columns[name][i]:.6f}" for name in names]
        lines.append("\t".join([label, *cells]))
    write_text(path, "\n".join(lines) + "\n")
