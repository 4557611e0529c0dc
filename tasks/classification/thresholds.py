"""Multi-label decision thresholds tuned on a labelled split: one for all labels, or one each.

Why: a sigmoid head's 0.5 is rarely the best cut for F1 when labels are rare (most of Reuters'
90 topics have a few dozen training documents), and users of multi-label BERT tune it on dev.
Candidates are the grid 0.01, 0.02, ..., 0.99; a label is predicted when its probability is
strictly above the threshold. `global` picks the candidate with the best micro-F1 over all labels;
`per_label` picks, for each label, the candidate with the best F1 of that label, and keeps the
default for a label with no gold document in the split (its F1 cannot be measured there). Ties go
to the candidate nearest the default (then the lower one), so a flat curve keeps 0.5.
"""
from __future__ import annotations

import numpy as np

CANDIDATES = np.arange(1, 100) / 100.0


def _f1(tp, fp, fn) -> np.ndarray:
    tp, fp, fn = (np.asarray(x, np.float64) for x in (tp, fp, fn))
    denominator = 2 * tp + fp + fn
    return np.divide(2 * tp, denominator, out=np.zeros_like(denominator), where=denominator != 0)


def _best(scores: np.ndarray, default: float) -> float:
    """The candidate with the highest score; ties: nearest `default`, then the lower."""
    best = scores.max()
    tied = CANDIDATES[np.isclose(scores, best, rtol=0, atol=1e-12)]
    return float(tied[np.argmin(np.abs(tied - default) + tied * 1e-9)])


def tune_thresholds(probabilities, labels, per_label: bool, default: float = 0.5) -> np.ndarray:
    """One threshold per label (column) that maximises F1 on these probabilities and 0/1 labels."""
    probabilities = np.asarray(probabilities, np.float64)
    gold = np.asarray(labels) > 0.5
    tp, fp, fn = (np.zeros((len(CANDIDATES), gold.shape[1]), np.int64) for _ in range(3))
    for c, candidate in enumerate(CANDIDATES):  # [candidates, labels] counts, a split at a time
        decided = probabilities > candidate
        tp[c], fp[c] = np.sum(decided & gold, 0), np.sum(decided & ~gold, 0)
        fn[c] = np.sum(~decided & gold, 0)
    if not per_label:
        score = _f1(tp.sum(-1), fp.sum(-1), fn.sum(-1))
        return np.full(gold.shape[1], _best(score, default))
    f1 = _f1(tp, fp, fn)
    return np.array([_best(f1[:, label], default) if gold[:, label].any() else default
                     for label in range(gold.shape[1])])
