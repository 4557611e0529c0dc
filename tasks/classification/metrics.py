"""The GLUE metrics (SPEC.md section 8) as plain NumPy functions of labels and predictions.

CoLA: Matthews correlation; MRPC and QQP: F1 (of label 1) and accuracy; STS-B: Pearson and
Spearman correlation; every other task: accuracy. Each task also has a `main` score, the one the
GLUE leaderboard shows for it (the mean of the two where it reports two), by which fine-tuning keeps
its best checkpoint. The original reported accuracy (and loss) only. Multi-label tasks are scored
by `multi_label_metrics` (micro-F1 is their `main`) and `per_label_metrics`.
"""
from __future__ import annotations

import numpy as np


def accuracy(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions))


def f1(labels, predictions, positive: int = 1) -> float:
    """F1 of the `positive` class; 0 when there is no true positive."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    true_pos = np.sum((predictions == positive) & (labels == positive))
    if true_pos == 0:
        return 0.0
    precision = true_pos / np.sum(predictions == positive)
    recall = true_pos / np.sum(labels == positive)
    return float(2 * precision * recall / (precision + recall))


def matthews_corr(labels, predictions) -> float:
    """Matthews correlation of binary labels; 0 when a margin is empty (as scikit-learn)."""
    labels, predictions = np.asarray(labels) == 1, np.asarray(predictions) == 1
    tp = float(np.sum(labels & predictions))
    tn = float(np.sum(~labels & ~predictions))
    fp = float(np.sum(~labels & predictions))
    fn = float(np.sum(labels & ~predictions))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denominator) if denominator else 0.0


def ranks(values) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their ranks (as scipy.stats.rankdata)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    # Runs of equal values: each gets the mean of the positions it spans.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    mean_rank = (starts + ends + 1) / 2.0
    result = np.empty(len(values))
    result[order] = np.repeat(mean_rank, ends - starts)
    return result


def spearman(x, y) -> float:
    return pearson(ranks(x), ranks(y))


_CLASSIFICATION = {
    "cola": ("matthews_corr", ("matthews_corr", "accuracy")),
    "mrpc": ("acc_and_f1", ("accuracy", "f1")),
    "qqp": ("acc_and_f1", ("accuracy", "f1")),
}


def glue_metrics(task: str, labels, predictions) -> dict:
    """All of a task's metrics plus `main`. Classification takes label ids, regression scores."""
    task = task.lower()
    if task in ("sts-b", "stsb") or np.asarray(predictions).dtype.kind == "f":
        results = {"pearson": pearson(labels, predictions),
                   "spearman": spearman(labels, predictions)}
        results["corr"] = results["main"] = (results["pearson"] + results["spearman"]) / 2
        return results
    main, names = _CLASSIFICATION.get(task, ("accuracy", ("accuracy",)))
    functions = {"accuracy": accuracy, "f1": f1, "matthews_corr": matthews_corr}
    results = {name: functions[name](labels, predictions) for name in names}
    if main == "acc_and_f1":
        results["acc_and_f1"] = (results["accuracy"] + results["f1"]) / 2
    results["main"] = results[main]
    return results


# ----------------------------------------------------------------------------------------------
# Multi-label: labels and predictions are 0/1 matrices, one row per document, one column per label.


def _counts(labels, predictions):
    """True positives, false positives, false negatives per label (column)."""
    labels = np.asarray(labels) > 0.5
    predictions = np.asarray(predictions) > 0.5
    return (np.sum(labels & predictions, axis=0).astype(np.float64),
            np.sum(~labels & predictions, axis=0).astype(np.float64),
            np.sum(labels & ~predictions, axis=0).astype(np.float64))


def _ratio(numerator, denominator):
    """numerator / denominator, 0 where the denominator is 0 (scikit-learn's zero_division=0)."""
    numerator, denominator = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator),
                     where=denominator != 0)


def per_label_metrics(labels, predictions) -> dict:
    """`precision`, `recall`, `f1` and `support` (gold documents) of each label, as arrays."""
    tp, fp, fn = _counts(labels, predictions)
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {"precision": precision, "recall": recall,
            "f1": _ratio(2 * tp, 2 * tp + fp + fn), "support": (tp + fn).astype(np.int64)}


def multi_label_metrics(labels, predictions) -> dict:
    """micro-F1 (the `main` score: F1 of all label decisions pooled), its precision and recall,
    macro-F1 (the mean of every label's F1, 0 for a label never predicted nor present) and subset
    accuracy (documents whose predicted set is exactly right)."""
    tp, fp, fn = (np.sum(count) for count in _counts(labels, predictions))
    results = {
        "micro_precision": float(_ratio(tp, tp + fp)),
        "micro_recall": float(_ratio(tp, tp + fn)),
        "micro_f1": float(_ratio(2 * tp, 2 * tp + fp + fn)),
        "macro_f1": float(np.mean(per_label_metrics(labels, predictions)["f1"])),
        "subset_accuracy": float(np.mean(np.all(
            (np.asarray(labels) > 0.5) == (np.asarray(predictions) > 0.5), axis=1))),
    }
    results["main"] = results["micro_f1"]
    return results
