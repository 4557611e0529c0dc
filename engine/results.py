"""`eval_results.txt` and the log's results block: the original's layout, written and read back.

Every evaluation (fine-tuning at each epoch's end, pretraining's `--do_eval`) writes its results
there as `key = value` lines: the keys the original writes first (`eval_accuracy`, `eval_loss`,
`global_step`, `loss`; pretraining's `masked_lm_*` and `next_sentence_*`), in sorted order as it
writes them, then this project's own keys (other metrics), sorted. Values are written at full
precision (Python's `str` of the float, which reads back to the same number), so that a threshold
pasted back as a flag decides as it did. `log_results` prints the same lines under the original's
`***** Eval results *****` header; `best/eval_results.txt` holds the best evaluation.
"""
from __future__ import annotations

import logging
import numbers
import os

from bert_tf2.process.atomic_files import write_text

RESULTS_FILE = "eval_results.txt"
# The keys the original's run_classifier and run_pretraining write (Estimator adds `global_step`
# and `loss`, the mean over evaluation batches of each batch's mean loss).
ORIGINAL_KEYS = frozenset({
    "eval_accuracy", "eval_loss", "global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
    "next_sentence_accuracy", "next_sentence_loss"})


def ordered_keys(results: dict) -> list:
    """The original's keys first, sorted as it sorts them, then ours, sorted."""
    return (sorted(k for k in results if k in ORIGINAL_KEYS)
            + sorted(k for k in results if k not in ORIGINAL_KEYS))


def write_eval_results(path: str, results: dict) -> None:
    """`key = value` lines in the original's order (see the module docstring)."""
    write_text(path, "".join(f"{key} = {value_text(results[key])}\n"
                             for key in ordered_keys(results)))


def log_results(results: dict, logger: logging.Logger, title: str = "Eval results") -> None:
    """The original's log block: `***** Eval results *****`, then `  key = value` lines."""
    logger.info("***** %s *****", title)
    for key in ordered_keys(results):
        logger.info("  %s = %s", key, value_text(results[key]))


def value_text(value) -> str:
    """Integers as integers (`global_step = 12`), other numbers as the shortest text that reads
    back to the same float64 (NumPy float32 values included, exactly)."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))


def read_eval_results(path: str) -> dict:
    """`key = value` lines back into a dict of floats (empty when the file is absent)."""
    results = {}
    if not os.path.isfile(path):
        return results
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.partition(" = ")
            if sep:
                results[key.strip()] = float(value)
    return results


def format_results(results: dict) -> str:
    """One summary line (4 decimals; `log_results` and the file keep full precision)."""
    return ", ".join(f"{k} = {results[k]:.4f}" if isinstance(results[k], float)
                     else f"{k} = {results[k]}" for k in ordered_keys(results))


def lower_is_better(metric: str) -> bool:
    return "loss" in metric or "error" in metric
